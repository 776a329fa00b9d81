package nemesis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// The residue of keys used once (per job, per request): after the run,
// a fresh Locker uses onceKeys keys once each, in every way the target
// allows (released, left to expire, a wait given up, shared, a permit,
// a named owner's hold) and, while it takes and releases another key
// every half second (tick: a backend in use), after the target's Bound and
// onceWait (Target.onceWait: the PostgreSQL driver sweeps a minute after,
// so its check waits that long, and only in make nemesis), the backend
// must keep no more than onceSlack things more
// than before (its Footprint: what no expiry of its own removes; on the
// memory Store, whatever it keeps of those keys), or it grows without
// bound with such keys (residue/once).
const (
	onceKeys  = 60
	onceSlack = 10
	onceWait  = 10 * time.Second
)

// onceResidue runs the check of keys used once, but for the negative
// controls, which are not asked to clean up, and the broken variants that
// skip it.
func (r *run) onceResidue() {
	if r.tg.control() || r.tg.skipOnce {
		return
	}
	wait := onceWait
	if r.tg.onceWait > 0 {
		wait = r.tg.onceWait
	}
	if r.cfg.Short && wait > onceWait {
		r.once = fmt.Sprintf("not checked in the short pass (it waits %v for the backend)", wait)
		return
	}
	count := r.footprint()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	before, err := count(ctx)
	cancel()
	if err != nil {
		r.problem("count what the backend keeps: %v", err)
		return
	}
	lk, err := r.open(r.serverAddrs(), 30*time.Second)
	if err != nil {
		r.problem("open a Locker for the keys used once: %v", err)
		return
	}
	used := r.useOnce(lk)
	bound := r.tg.Bound + wait
	deadline := time.Now().Add(bound)
	defer lk.Close()
	for {
		r.tick(lk)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		after, err := count(ctx)
		cancel()
		if err != nil {
			r.problem("count what the backend keeps: %v", err)
			return
		}
		r.once = fmt.Sprintf("%d keys (%s): %d things kept before, %d after", onceKeys, used, before, after)
		if after-before <= onceSlack {
			return
		}
		if time.Now().After(deadline) {
			now := r.clk.Now()
			r.rec.Violate(Violation{Kind: "residue", Check: "once", At: now, From: now, Proc: parentProc,
				Text: fmt.Sprintf("%d keys used once left %d things on the backend %v after their last use (%d before, %d after; at most %d allowed): it grows with every key used once",
					onceKeys, after-before, bound, before, after, onceSlack)})
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// tick takes and releases one key, the same each time, through lk: the
// backend stays in use while the check waits, as it would in an
// application, and what cleans up as it is used (PostgreSQL's sweep, the
// memory Store's) runs.
func (r *run) tick(lk Locker) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if l, err := lk.TryLock(ctx, "once/tick"); err == nil {
		l.Unlock(ctx)
	}
}

// footprint counts what the backend keeps that no expiry removes: the
// server's Footprint, or on the memory Store, the items it keeps of the
// keys used once.
func (r *run) footprint() func(context.Context) (int, error) {
	if r.srv != nil {
		return r.srv.Footprint
	}
	return func(context.Context) (int, error) {
		n := 0
		for i := range onceKeys {
			n += len(r.store.Dump(r.onceKey(i)))
		}
		return n, nil
	}
}

func (r *run) onceKey(i int) string { return fmt.Sprintf("once/%d/%d", r.cfg.Seed, i) }

// useOnce uses each key once, the i-th in the i-th way of six (those the
// Locker allows), and waits for the leases left to expire to be over.
// It returns what it did, counted by way.
func (r *run) useOnce(lk Locker) string {
	ways := map[string]int{}
	call := func(f func(ctx context.Context) error) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return f(ctx)
	}
	unlock := func(l *lock.Lease) {
		call(func(ctx context.Context) error { return l.Unlock(ctx) })
	}
	ttl := r.tg.TTL // the shortest the target's leases may be
	if len(r.tg.LockTTLs) > 0 {
		ttl = slices.Min(r.tg.LockTTLs)
	}
	for i := range onceKeys {
		key := r.onceKey(i)
		var l *lock.Lease
		var err error
		way := onceWay(lk, r.tg.Reentry, i)
		switch way {
		case "released":
			err = call(func(ctx context.Context) error { l, err = lk.Lock(ctx, key); return err })
		case "expired":
			err = call(func(ctx context.Context) error {
				_, err := lk.TryLock(ctx, key, lock.WithTTL(ttl), lock.WithDisableAutoRenew(true))
				return err
			})
		case "wait-given-up":
			err = call(func(ctx context.Context) error { l, err = lk.Lock(ctx, key); return err })
			if err == nil {
				wctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				_, werr := lk.Lock(wctx, key)
				cancel()
				if werr == nil || !errors.Is(werr, context.DeadlineExceeded) {
					r.problem("a wait on the held key %q ended with %v, not its context", key, werr)
				}
			}
		case "shared":
			err = call(func(ctx context.Context) error { l, err = lk.RLock(ctx, key); return err })
		case "permit":
			err = call(func(ctx context.Context) error { l, err = lk.Acquire(ctx, key, 2); return err })
		case "named":
			err = call(func(ctx context.Context) error { l, err = lk.Lock(ctx, key, lock.WithOwner("once")); return err })
		}
		if err != nil {
			r.problem("use key %q once (%s): %v", key, way, err)
			continue
		}
		ways[way]++
		if l != nil {
			unlock(l)
		}
	}
	time.Sleep(ttl + 500*time.Millisecond) // the leases left to expire are over
	return tally(ways, " ")
}

// onceWay is the way the i-th key is used: one of six, those the Locker
// (or the target: named owners' holds) does not allow replaced by a
// release.
func onceWay(lk Locker, named bool, i int) string {
	way := []string{"released", "expired", "wait-given-up", "shared", "permit", "named"}[i%6]
	rw := lk.Supports(lock.SharedLeases) == nil
	sem := lk.Supports(lock.Permits) == nil
	if way == "shared" && !rw || way == "permit" && !sem || way == "named" && !named {
		return "released"
	}
	return way
}
