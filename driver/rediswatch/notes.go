package rediswatch

import (
	"context"
	"errors"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/redis/go-redis/v9"
)

// Grant notes (driver.Lease.Note) live in P{K}:n, a hash of owner token ->
// note, redisnx's layout (internal/redisx NotesSuffix), so that the two
// drivers read and write the same notes:
//
//   - The transaction that grants writes the note (HSET) and lengthens the
//     hash to the grant's TTL where it ended sooner (its PTTL read under
//     WATCH): every mode; a re-entry keeps the first hold's note.
//   - A waiter with a note writes it before it joins the queue and before
//     each renewal of its entry (keepNote), kept two entry lifetimes and
//     its TTL from then, so that a release hands over a grant whose note
//     is there already.
//   - A noted Lease's refresh lengthens the hash, never shortening it (other
//     notes count on it): PEXPIRE ... GT on Redis 7, its PTTL read under
//     WATCH otherwise. A resumed Lease learns whether its grant has a note.
//   - A noted Lease's release, or its Leave, deletes its field (a named
//     owner's grant: its last hold's release deletes the first hold's,
//     always). A Leave that finds the key handed to it leaves the field
//     to the release that passes the key on (the same transaction): no
//     one sees the key held without its note.
//
// Attempts without a note send no command on P{K}:n.

// notesKey is the notes hash of lock key lk.
func notesKey(lk string) string { return lk + redisx.NotesSuffix }

// notedGrant marks, in driver.Lease.Data, a resumed permit or hold whose
// grant has a note (a resumed Lease's own Note is empty).
type notedGrant struct{}

// noted reports whether l's grant has a note in P{K}:n, which its
// refreshes lengthen and its release deletes.
func noted(l *driver.Lease) bool {
	switch d := l.Data.(type) {
	case fromQueue:
		return l.Note != "" || d.note
	case notedGrant:
		return true
	}
	return l.Note != ""
}

// waitNote is a waiter's note ("" for none), which its join and the
// renewals of its entry write, kept life ms from then: two entry lifetimes
// and its TTL (a hand-over grants only a live entry, for the TTL), so
// that a release hands over a grant whose note is there already.
type waitNote struct {
	note string
	life int64
}

// waitNoteOf is l's waitNote.
func waitNoteOf(l *driver.Lease) waitNote {
	return waitNoteFor(l.Note, px(l.TTL).Milliseconds())
}

// waitNoteFor is the waitNote of a waiter with note and a TTL of ttl ms.
func waitNoteFor(note string, ttl int64) waitNote {
	if note == "" {
		return waitNote{}
	}
	return waitNote{note: note, life: 2*redisx.EntryLifeMS + ttl}
}

// noteCmds queues the writes of owner's note on lk, in a transaction whose
// read found the hash's PTTL pttl under WATCH: the field, and the hash's
// expiry lengthened to life ms where it ended sooner.
func noteCmds(ctx context.Context, p doer, lk, owner, note string, pttl time.Duration, life int64) {
	n := notesKey(lk)
	p.Do(ctx, "hset", n, owner, note)
	lengthenCmd(ctx, p, n, pttl, life)
}

// lengthenCmd queues a PEXPIRE of the notes hash n to life ms when its
// PTTL, read under WATCH, was less (negative: missing or no expiry).
func lengthenCmd(ctx context.Context, p doer, n string, pttl time.Duration, life int64) {
	if pttl < 0 || pttl.Milliseconds() < life {
		p.Do(ctx, "pexpire", n, life)
	}
}

// keepNote writes owner's note on lk and keeps the hash at least life ms,
// in two round trips (any server version):
//
//	WATCH notes; PTTL notes
//	MULTI; HSET notes OWNER NOTE; [PEXPIRE notes life]; EXEC
func (d *watchDriver) keepNote(ctx context.Context, lk, owner, note string, life int64) error {
	n := notesKey(lk)
	return d.retryAborted(ctx, "note", lk, &d.stats.refreshAborts, func() error {
		return d.onConn(ctx, lk, func(ctx context.Context, tx *redis.Tx) error {
			var pttl *redis.DurationCmd
			if err := watchAndRead(ctx, tx, []string{n}, func(p redis.Pipeliner) { pttl = p.PTTL(ctx, n) }); err != nil {
				return err
			}
			return exec(ctx, tx, func(p redis.Pipeliner) { noteCmds(ctx, p, lk, owner, note, pttl.Val(), life) })
		})
	})
}

// resumeNote reports whether the grant of owner on lk (a hold's: the
// grant's first hold, the lock key's value) has a note, and lengthens the
// hash to ttl where it ended sooner: one round trip (two for a hold) when
// it has none or lasts long enough, then keepNote's lengthening:
//
//	[GET lock]
//	HEXISTS notes FIELD; PTTL notes
//	(WATCH notes; PTTL notes  /  MULTI; PEXPIRE notes ttl; EXEC)
func (d *watchDriver) resumeNote(ctx context.Context, lk, owner string, hold bool, ttl time.Duration) (bool, error) {
	n := notesKey(lk)
	var has, short bool
	err := d.onConn(ctx, lk, func(ctx context.Context, tx *redis.Tx) error {
		has, short = false, false
		field := owner
		if hold {
			v, err := tx.Get(ctx, lk).Result()
			if errors.Is(err, redis.Nil) {
				return nil // gone meanwhile: its refreshes will tell
			}
			if err != nil {
				return err
			}
			field = v
		}
		var (
			ex   *redis.BoolCmd
			pttl *redis.DurationCmd
		)
		if err := read(ctx, tx, func(p redis.Pipeliner) { ex, pttl = p.HExists(ctx, n, field), p.PTTL(ctx, n) }); err != nil {
			return err
		}
		has = ex.Val()
		short = has && (pttl.Val() < 0 || pttl.Val() < ttl)
		return nil
	})
	if err != nil || !short {
		return has, err
	}
	return has, d.lengthenNotes(ctx, lk, ttl.Milliseconds())
}

// lengthenNotes makes lk's notes hash last at least life ms, never
// shortening it, in two round trips (any server version):
//
//	WATCH notes; PTTL notes
//	MULTI; PEXPIRE notes life; EXEC      (or UNWATCH, if it lasts that long)
func (d *watchDriver) lengthenNotes(ctx context.Context, lk string, life int64) error {
	n := notesKey(lk)
	return d.retryAborted(ctx, "resume", lk, &d.stats.refreshAborts, func() error {
		return d.onConn(ctx, lk, func(ctx context.Context, tx *redis.Tx) error {
			var pttl *redis.DurationCmd
			if err := watchAndRead(ctx, tx, []string{n}, func(p redis.Pipeliner) { pttl = p.PTTL(ctx, n) }); err != nil {
				return err
			}
			if pttl.Val() >= 0 && pttl.Val().Milliseconds() >= life {
				unwatch(ctx, tx)
				return nil
			}
			return exec(ctx, tx, func(p redis.Pipeliner) { lengthenCmd(ctx, p, n, pttl.Val(), life) })
		})
	})
}
