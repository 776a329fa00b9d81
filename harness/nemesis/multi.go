package nemesis

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/dlock-go/dlock/lock"
)

// Multi-key sets (Locker.LockMany, TryLockMany): a worker takes 2 or 3
// of the hot keys, given in random order, so that sets overlap each other
// and the single-key leases; or, half of the time, 2 or 3 of the set keys
// (setKeys), a small pool of colder keys of the sets' own: a hot key is
// almost always held or waited for, so a set of hot keys is rarely taken
// in one step (driver.SetAcquirer grants a set only where no key is held
// nor has waiters) and falls back to key by key, or is refused. The set
// keys still overlap each other, and single-key operations take one of
// them now and then (pSetKeySingle), so that the checker sees sets and
// single leases interleave on them too. The run counts the sets granted
// in one step (MultiLease.Atomic: set-atomic) and key by key
// (set-by-key), and requires the first where the driver is a
// SetAcquirer, the second elsewhere (see Unexercised); and the attempts
// at set keys by outcome (set-keys-granted, and set-keys-held, -ctx or
// -failed: a key held or waited for, the context ended, another error,
// such as the backend unreachable during a fault).
//
// Each member is a lease like any other for the checker (overlap,
// tokens, writes, Done), recorded per key. What is
// particular to sets is all or nothing: a failed or cancelled attempt
// must leave none of its keys held. After such an attempt the worker
// reads its keys' holders (Inspect, where the driver has it) at once and
// again once Target.Bound and Recovery have passed: a holder found both
// times, with no server fault nor frozen process meanwhile (nor within
// Recovery before), outlived every grant that no one holds (a reply lost,
// an attempt given up, whose clean-up a server fault holds up), so it
// must be a lease handed to some worker. It is reported
// as a "multi-held" event, and the Recorder, at the end of the run, finds
// a violation (multi-partial) when no lease of the run has its owner
// token: a set's member kept by an attempt that failed. A failed attempt
// is recorded (set-failed) for each of its keys, with when it began and
// returned: another attempt's holder may be its member, held while it
// waited for its next key (see setInFlightLocked).

// pMulti is the chance that a worker's step is a multi-key attempt.
const pMulti = 0.08

// multiTimeouts are LockMany's: longer than a Lock's mostly, since a set
// waits for each of its hot keys in turn.
var multiTimeouts = ms(150*time.Millisecond, 1500*time.Millisecond, 3*time.Second, longWait)

// pSetKeys is the share of the sets taken among the set keys rather than
// the hot keys; pSetKeySingle the chance that a single-key operation
// takes a set key rather than a hot key.
const (
	pSetKeys      = 0.5
	pSetKeySingle = 0.03
)

// nSetKeys is how many set keys there are.
const nSetKeys = 4

// setKeys are the set keys, "set/N", all in one Redis Cluster hash slot
// (the drivers' Redis keys carry the lock key as their hash tag), so that
// a Cluster takes a set of them in one step too (else ErrNotAtomic: key
// by key). Every process computes the same.
var setKeys = sync.OnceValue(func() []string {
	keys := []string{"set/0"}
	slot := redisx.Slot(redisx.LockKey("", keys[0]))
	for i := 1; len(keys) < nSetKeys; i++ {
		if k := fmt.Sprintf("set/%d", i); redisx.Slot(redisx.LockKey("", k)) == slot {
			keys = append(keys, k)
		}
	}
	return keys
})

// multiSet picks 2 or 3 distinct keys in random order: hot keys, or set
// keys (cold) with probability pSetKeys (always when owed is set).
func (w *worker) multiSet(owed bool) (set []string, cold bool) {
	keys := slices.Clone(w.env.keys)
	if cold = owed || w.chance(pSetKeys); cold {
		keys = slices.Clone(setKeys())
	}
	w.rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	return keys[:min(len(keys), 2+w.rng.IntN(2))], cold
}

// singleKey is the key of a single-key operation: a hot key, or now and
// then a set key.
func (w *worker) singleKey() string {
	if w.chance(pSetKeySingle) {
		return pick(w.rng, setKeys())
	}
	return pick(w.rng, w.env.keys)
}

// multi makes one LockMany or TryLockMany of a random set and holds what
// it gets; it reports whether it got the set. owed (a set grant the run
// still owes: see owed.go): a TryLockMany of set keys, which queues on no
// key.
//
// A set of set keys is mostly a TryLockMany, and held no longer than
// half its TTL: a LockMany that finds a key held waits for each key in
// its queue, and a long hold keeps the set keys taken, and either way a
// one-step attempt is refused meanwhile.
func (w *worker) multi(in *lockerInst, owed bool) bool {
	set, cold := w.multiSet(owed)
	ttl, renew, opts := w.lockOpts()
	op, timeouts, pCancel := "lockmany", multiTimeouts, 0.25
	pTry := 0.5
	if cold {
		pTry = 0.8
	}
	if owed || w.chance(pTry) {
		op, timeouts, pCancel = "trylockmany", tryTimeouts, 0.1
	}
	c := w.newCallCtx(timeouts, pCancel)
	clk, s := w.env.clk, w.env.sink
	start := clk.Now()
	var m *lock.MultiLease
	var err error
	if op == "lockmany" {
		m, err = in.lk.LockMany(c.ctx, set, opts...)
	} else {
		m, err = in.lk.TryLockMany(c.ctx, set, opts...)
	}
	end := clk.Now()
	limit := c.end()
	c.release()
	s.Ops(1)
	s.Stat(op, 1)
	w.checkReturn(op, set[0], start, end, limit, "its context ended")
	if err != nil {
		w.failed(op, set[0], err)
		for _, k := range set {
			// Its keys taken one by one were held, by an owner no lease
			// of the run has, from their grant until it returned: see
			// leftoversLocked.
			s.Event(Event{At: end, From: start, Kind: "set-failed", Key: k, Text: fmt.Sprintf("%s of %v: %s", op, set, short(err))})
		}
		if cold {
			s.Stat("set-keys-"+setFailure(err), 1)
		}
		w.checkLeftovers(in, set, end)
		return false
	}
	s.Stat(op+"-granted", 1)
	if cold {
		s.Stat("set-keys-granted", 1)
	}
	if m.Atomic() {
		s.Stat("set-atomic", 1)
	} else {
		s.Stat("set-by-key", 1)
	}
	var members []*liveLease
	for _, lease := range m.Leases() {
		if l := w.granted(in, lease, op, lease.Key(), exclusive, ttl, renew, start); l != nil {
			members = append(members, l)
		}
	}
	hold := w.holdTime(ttl)
	if cold {
		hold = min(hold, ttl/2)
	}
	w.holdSet(members, hold)
	for _, l := range members {
		l.markUnlocking(clk, s, "unlock set")
	}
	uc := w.newCallCtx(unlockTimeouts, 0.05)
	ustart := clk.Now()
	uerr := m.Unlock(uc.ctx)
	uend := clk.Now()
	ulimit := uc.end()
	uc.release()
	s.Ops(1)
	w.checkReturn("unlock set", set[0], ustart, uend, ulimit, "its context ended")
	for _, l := range members {
		s.Event(Event{At: uend, Kind: "unlocked", Key: l.key, Lease: l.id, Text: short(uerr)})
		if !closed(l.lease.Done()) && !in.isClosing() {
			s.Violate(Violation{Kind: "unlock-open", At: uend, From: ustart, Key: l.key, Proc: w.env.proc, Lease: l.id,
				Text: fmt.Sprintf("key %q: Unlock of the set of lease %s returned (%s) with its Done open", l.key, l.id, short(uerr))})
		}
		l.observe(clk, s)
	}
	return true
}

// holdSet holds the members of a set for holdFor: each written to while
// it is held, until one is not or holdFor passes.
func (w *worker) holdSet(members []*liveLease, holdFor time.Duration) {
	clk, s := w.env.clk, w.env.sink
	t := time.NewTicker(writeEvery)
	defer t.Stop()
	until := time.Now().Add(holdFor)
	for {
		for _, l := range members {
			if !l.observe(clk, s) {
				return
			}
			s.Write(l.key, l.id, l.granted, l.token)
		}
		if time.Now().After(until) {
			return
		}
		select {
		case <-t.C:
		case <-w.env.stop:
			return
		}
	}
}

// checkLeftovers reads the holders of set after an attempt at it failed
// (at end), and again after Bound and Recovery have passed, on the slot's
// Locker of the moment; it reports each holder found both times as a
// multi-held event (see above). Drivers without Inspect are not read.
func (w *worker) checkLeftovers(in *lockerInst, set []string, end Stamp) {
	if in.lk.Supports(lock.Inspect) != nil {
		return
	}
	first := holders(in, set)
	if len(first) == 0 {
		return
	}
	seen := w.env.clk.Now()
	w.env.sink.Stat("multi-leftover-read", 1)
	wait := w.env.tg.Bound + w.env.tg.Recovery
	if wait <= 0 {
		wait = 2 * slices.Max(w.env.tg.LockTTLs)
	}
	w.leftovers.Add(1)
	go func() {
		defer w.leftovers.Done()
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-w.env.stop:
			return
		}
		now := w.slot.current()
		if now == nil {
			return
		}
		second := holders(now, set)
		for h := range first {
			if second[h] {
				w.env.sink.Event(Event{At: w.env.clk.Now(), From: seen, Kind: "multi-held", Key: h.key, Lease: h.owner,
					Text: fmt.Sprintf("held by owner %s since before the failed set attempt that ended at %v, and still %v later", h.owner, end, wait)})
			}
		}
	}()
}

// heldBy is one holder of a key, as Inspect tells it.
type heldBy struct{ key, owner string }

// holders returns the holders of keys that dlock made (not foreign ones),
// as one Inspect of each key through in finds them; a failed Inspect
// gives none for its key.
func holders(in *lockerInst, keys []string) map[heldBy]bool {
	out := map[heldBy]bool{}
	for _, k := range keys {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		st, err := in.lk.Inspect(ctx, k)
		cancel()
		if err != nil {
			continue
		}
		for _, h := range st.Holders {
			if !h.Foreign {
				out[heldBy{k, h.Owner}] = true
			}
		}
	}
	return out
}

var setAcquirerType = reflect.TypeFor[driver.SetAcquirer]()

// oneStepSets reports whether lk's driver takes sets in one backend step:
// whether it implements driver.SetAcquirer, found at run time on the
// driver under the *lock.Locker that lk is or wraps (a wrapper embeds the
// Locker it wraps, as ownClient does), so that a driver that gains
// AcquireSet is required to grant sets in one step (see Unexercised)
// without a change here. lock.Locker does not export its driver: it is
// read by reflection, and an error says when that no longer works.
func oneStepSets(lk Locker) (bool, error) {
	for range 10 {
		if l, ok := lk.(*lock.Locker); ok {
			v := reflect.ValueOf(l)
			if l == nil {
				return false, errors.New("a nil *lock.Locker")
			}
			d := v.Elem().FieldByName("d")
			if !d.IsValid() || d.Kind() != reflect.Interface || d.Type() != reflect.TypeFor[driver.Driver]() {
				return false, errors.New("lock.Locker has no field d of type driver.Driver any more: the nemesis cannot tell whether its driver takes sets in one step")
			}
			return !d.IsNil() && d.Elem().Type().Implements(setAcquirerType), nil
		}
		v := reflect.ValueOf(lk)
		for v.Kind() == reflect.Pointer && !v.IsNil() {
			v = v.Elem()
		}
		var inner reflect.Value
		if v.Kind() == reflect.Struct {
			if f, ok := v.Type().FieldByName("Locker"); ok && f.Anonymous && len(f.Index) == 1 {
				inner = v.Field(f.Index[0])
			}
		}
		if !inner.IsValid() || inner.Type() != reflect.TypeFor[Locker]() || inner.IsNil() {
			return false, fmt.Errorf("a %T is no *lock.Locker and wraps none (no embedded Locker)", lk)
		}
		lk = inner.Interface().(Locker)
	}
	return false, fmt.Errorf("%T: Lockers wrapped too deep", lk)
}

// setFailure names why a set attempt failed, for the summary's counts of
// the set keys' attempts: a key held (or waited for), the context ended,
// or another error.
func setFailure(err error) string {
	switch {
	case errors.Is(err, lock.ErrHeld):
		return "held"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return "ctx"
	}
	return "failed"
}
