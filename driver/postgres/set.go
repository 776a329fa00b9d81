package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/dlock-go/dlock/driver"
)

var _ driver.SetAcquirer = (*pgDriver)(nil)

// setQueries are the statements of a set's step (see AcquireSet), of
// schema s: prepare makes the keys' missing rows and locks them all in
// the order of the key column (refresh3's order); undo ends the grants
// of owners os at keys ks (pairwise) unless every one of the n keys is
// held by its owner.
func setQueries(s string) (prepare, undo string) {
	prepare = "INSERT INTO " + s + ".keys (key) SELECT u.k FROM pg_catalog.unnest($1) AS u(k) ORDER BY u.k ON CONFLICT (key) DO NOTHING; " +
		"SELECT x.key FROM " + s + ".keys x WHERE x.key = ANY ($1) ORDER BY x.key FOR UPDATE"
	undo = "UPDATE " + s + ".keys x SET holder = NULL, since = NULL, expires = NULL, pending = NULL, note = NULL" +
		" FROM unnest($1, $2) AS u(k, o) WHERE x.key = u.k AND x.holder = u.o" +
		" AND (SELECT count(*) FROM " + s + ".keys y, unnest($1, $2) AS v(k, o) WHERE y.key = v.k AND y.holder = v.o) < $3"
	return prepare, undo
}

// AcquireSet implements driver.SetAcquirer: one step (one transaction,
// one simple-protocol query, one round trip) of the wrapped form (see
// run):
//
//	BEGIN ...; SELECT set_config(...);
//	INSERT the keys' missing rows; SELECT them FOR UPDATE, ORDER BY key;
//	SELECT ... FROM lock3(key, owner, ttl, false, ...)   for each key
//	UPDATE keys: undo the set's grants unless every key is granted;
//	COMMIT
//
// lock3 without queueing is Acquire's own step: it grants a key only
// where a TryLock would (no live grant, no waiter, no tombstone of the
// owner), in the key's row, with the key's next token. A plain statement
// cannot roll back the ones before it without an error (which the server
// logs, and whose ROLLBACK costs a second round trip), so the last
// statement ends the set's own grants when one key was refused: what
// commits then is what a refused TryLock of each key leaves (expired
// grants and entries purged, an empty row; counters moved on, which only
// raises the floor of later tokens). No one sees the grants in between:
// the rows stay locked until the COMMIT.
//
// The rows are locked before any lock3, in the order of the key column,
// the order refresh3 locks a batch in: a set and a renewal batch (or
// another set) never wait for each other in a cycle, whatever the
// database's collation.
//
// A lost reply: lock releases each lease by owner (release3), which ends
// the grant if the set committed it, and otherwise leaves a tombstone
// that a late copy of the step meets (lock3 then reports the attempt
// voided, and the set undoes itself).
func (d *pgDriver) AcquireSet(ctx context.Context, ls []*driver.Lease) error {
	for _, l := range ls {
		l.Data, l.Token = nil, 0
	}
	if err := d.ready(ctx); err != nil {
		for _, l := range ls {
			l.Data = notSent{}
		}
		return unreachable(err)
	}
	prepare, undo := setQueries(d.schema)
	keys, owners := make([]string, len(ls)), make([]string, len(ls))
	calls := make([]string, 1, len(ls)+2)
	for i, l := range ls {
		keys[i], owners[i] = l.Key, l.Owner
		call, err := bind(d.q.fastAcquire, []any{l.Key, l.Owner, int64(driver.Exclusive), int64(0), micros(l.TTL), false, false, micros(entryLife), ""})
		if err != nil {
			return err
		}
		calls = append(calls, call)
	}
	first, err := bind(prepare, []any{keys})
	if err != nil {
		return err
	}
	last, err := bind(undo, []any{keys, owners, int64(len(ls))})
	if err != nil {
		return err
	}
	calls[0] = first
	calls = append(calls, last)
	res, err := d.runCalls(ctx, nil, nil, strings.Join(calls, "; "), len(ls)+3)
	if err != nil {
		return unreachable(err)
	}
	d.tick()
	var (
		refused   *driver.HeldError
		abandoned bool
		taken     int64
	)
	for i, l := range ls {
		r, err := row1(res[2+i].Rows, 4)
		if err != nil {
			return err
		}
		var s step
		if s.token, err = textInt(r[0]); err == nil {
			s.retry, err = textInt(r[1])
		}
		if err != nil {
			return err
		}
		s.voided = textBool(r[3])
		switch {
		case s.voided:
			abandoned = true
		case s.token > 0:
			l.Token, l.Validity = uint64(s.token), time.Duration(micros(l.TTL))*time.Microsecond
			taken++
		case refused == nil:
			refused = &driver.HeldError{}
			fallthrough
		default:
			if after := time.Duration(s.retry)*time.Millisecond + time.Millisecond; s.retry > 0 && (refused.RetryAfter == 0 || after < refused.RetryAfter) {
				refused.RetryAfter = after
			}
		}
	}
	granted := refused == nil && !abandoned
	if undone := res[len(res)-1].CommandTag.RowsAffected(); granted && undone != 0 || !granted && undone != taken {
		return fmt.Errorf("%w: the set's undo ended %d grants of %d", errShape, undone, taken)
	}
	if granted {
		return nil
	}
	for _, l := range ls {
		l.Token, l.Validity = 0, 0
	}
	if abandoned {
		return errAbandoned
	}
	return refused
}
