package drivertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// InspectCaps say what lock.Inspect tells on a backend. The suite checks
// that what a driver tells is right, and that it says (KeyState.Unknown)
// exactly what these leave out.
type InspectCaps struct {
	// Tokens: an exclusive holder's fencing token (a named owner's grant's
	// is required wherever Reentry is set).
	Tokens bool
	// SharedTokens: readers' and permits' tokens.
	SharedTokens bool
	// Remaining: how long each grant lasts.
	Remaining bool
	// Since: when each holder was granted (or its request made).
	Since bool
	// Waiters: the waiters the backend queues are listed.
	Waiters bool
	// WaiterSince: when each waiter joined the queue.
	WaiterSince bool
	// ExpiryLag is how long after its TTL the backend may still keep an
	// expired grant, which Inspect then lists (nobody else can be granted
	// the key meanwhile either): etcd deletes a lease's keys only when
	// its leader's lessor, on a 500 ms tick, finds the lease expired and
	// commits its revocation. Inspect/Expired waits that much longer.
	ExpiryLag time.Duration
}

// sinceSlack is how far a backend's clock (ZooKeeper's ctime, the
// server's) may be from this process's in a Since.
const sinceSlack = 2 * time.Second

// inspectCaps returns the Inspect capabilities of h, or, when the driver
// cannot inspect (Caps.Inspect nil), checks that lock.Inspect refuses with
// ErrInvalid and ends the test.
func inspectCaps(t *testing.T, h Harness) InspectCaps {
	t.Helper()
	ic := h.Caps().Inspect
	if ic == nil {
		_, err := h.NewLocker(t, nil).Inspect(ctx(t, 10*time.Second), key(t))
		if !errors.Is(err, lock.ErrInvalid) {
			t.Fatalf("lock.Inspect on a driver that cannot inspect: err = %v, want ErrInvalid", err)
		}
		t.Logf("refused as it should be: %v", err)
		t.SkipNow()
	}
	return *ic
}

// inspect calls lock.Inspect through l, checks the result's form (its
// key, and that Unknown says what ic leaves out), and returns it.
func inspect(t *testing.T, l *lock.Locker, ic InspectCaps, k string) *lock.KeyState {
	t.Helper()
	st, err := l.Inspect(ctx(t, 10*time.Second), k)
	if err != nil {
		t.Fatalf("Inspect(%q): %v", k, err)
	}
	if st.Key != k {
		t.Errorf("Inspect(%q).Key = %q", k, st.Key)
	}
	if st.Unknown.Waiters != !ic.Waiters {
		t.Errorf("Unknown.Waiters = %v; the harness says the driver lists waiters: %v", st.Unknown.Waiters, ic.Waiters)
	}
	if st.Unknown.Remaining != !ic.Remaining {
		t.Errorf("Unknown.Remaining = %v; the harness says the driver tells remaining times: %v", st.Unknown.Remaining, ic.Remaining)
	}
	if !ic.Waiters && len(st.Waiters) > 0 {
		t.Errorf("waiters listed by a driver that says it cannot see them: %+v", st.Waiters)
	}
	checkUnknownTold(t, ic, st)
	return st
}

// checkUnknownTold checks that Unknown.Tokens and Unknown.Since are false
// where ic says the driver tells the field of every holder and waiter
// listed (they say that at least one of them lacks it); checkHolder and
// testInspectWaiters check the other way, that they are true where a
// listed one lacks it.
func checkUnknownTold(t *testing.T, ic InspectCaps, st *lock.KeyState) {
	t.Helper()
	tokens, since := true, true
	for _, hd := range st.Holders {
		told := ic.Tokens
		if hd.Mode != lock.Exclusive {
			told = ic.SharedTokens
		}
		tokens = tokens && told && !hd.Foreign
		since = since && ic.Since
	}
	if len(st.Waiters) > 0 {
		since = since && ic.WaiterSince
	}
	if tokens && st.Unknown.Tokens {
		t.Errorf("Unknown.Tokens set, and the harness says the driver tells the token of every holder listed: %+v", st.Holders)
	}
	if since && st.Unknown.Since {
		t.Errorf("Unknown.Since set, and the harness says the driver tells when every holder and waiter listed came: holders %+v, waiters %+v", st.Holders, st.Waiters)
	}
}

// ownerOf is the owner token of lease, from its handle
// (dlock1.MODE.OWNER.TOKEN.KEY).
func ownerOf(t *testing.T, lease *lock.Lease) string {
	t.Helper()
	parts := strings.Split(lease.Handle(), ".")
	if len(parts) != 5 {
		t.Fatalf("handle %q", lease.Handle())
	}
	return parts[2]
}

// assertUnchanged fails when the backend state of k (Harness.Dump) differs
// from before.
func assertUnchanged(t *testing.T, h Harness, k string, before []string, what string) {
	t.Helper()
	after, err := h.Dump(ctx(t, 10*time.Second), k)
	if err != nil {
		t.Fatalf("Dump: %v", err)
	}
	if !slices.Equal(before, after) {
		t.Errorf("%s changed the backend state of the key:\nbefore %q\nafter  %q", what, before, after)
	}
}

func dump(t *testing.T, h Harness, k string) []string {
	t.Helper()
	d, err := h.Dump(ctx(t, 10*time.Second), k)
	if err != nil {
		t.Fatalf("Dump: %v", err)
	}
	return d
}

// checkHolder checks what Inspect tells of the grant of lease (granted
// between from and to, with TTL ttl) against ic.
func checkHolder(t *testing.T, ic InspectCaps, st *lock.KeyState, got lock.Holder, lease *lock.Lease, mode lock.Mode, ttl time.Duration, from, to time.Time) {
	t.Helper()
	if got.Owner != ownerOf(t, lease) || got.Mode != mode || got.Limit != lease.Limit() || got.Holds != 0 || got.Foreign {
		t.Errorf("holder %+v; want owner %s, %v, limit %d, no holds, not foreign", got, ownerOf(t, lease), mode, lease.Limit())
	}
	tokens := ic.Tokens
	if mode != lock.Exclusive {
		tokens = ic.SharedTokens
	}
	switch {
	case tokens && got.Token != lease.Token():
		t.Errorf("holder's token %d; the lease's is %d", got.Token, lease.Token())
	case !tokens && (got.Token != 0 || !st.Unknown.Tokens):
		t.Errorf("holder's token %d (Unknown.Tokens %v) on a driver that cannot tell it: want 0 and Unknown.Tokens", got.Token, st.Unknown.Tokens)
	}
	switch {
	case ic.Remaining && (got.Remaining <= 0 || got.Remaining > ttl):
		t.Errorf("holder's remaining time %v; want in (0, %v]", got.Remaining, ttl)
	case !ic.Remaining && got.Remaining != 0:
		t.Errorf("holder's remaining time %v on a driver that cannot tell it", got.Remaining)
	}
	switch {
	case ic.Since && (got.Since.Before(from.Add(-sinceSlack)) || got.Since.After(to.Add(sinceSlack))):
		t.Errorf("holder since %v; granted between %v and %v", got.Since, from, to)
	case !ic.Since && (!got.Since.IsZero() || !st.Unknown.Since):
		t.Errorf("holder since %v (Unknown.Since %v) on a driver that cannot tell it", got.Since, st.Unknown.Since)
	}
}

// Inspect/Holders: a free key shows nobody; a held key shows its one
// holder, with the lease's owner, mode and (where the backend tells)
// token, remaining time and grant time; a named owner's grant shows once,
// with its holds and the owner's name. Inspect changes nothing on the
// backend (the state is dumped before and after) and takes nothing: the
// key stays its holder's. Bad keys are refused before any I/O.
func testInspectHolders(t *testing.T, h Harness) {
	ic := inspectCaps(t, h)
	a, b := h.NewLocker(t, nil), h.NewLocker(t, nil)
	k := key(t)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, bad := range []string{"", strings.Repeat("k", lock.MaxKeyLen+1), "bad\xffkey"} {
		if _, err := b.Inspect(cancelled, bad); !errors.Is(err, lock.ErrInvalid) || errors.Is(err, context.Canceled) {
			t.Errorf("Inspect(%.20q): err = %v, want ErrInvalid before any I/O", bad, err)
		}
	}

	if st := inspect(t, b, ic, k); st.Held() || len(st.Waiters) > 0 {
		t.Errorf("a key never locked: holders %+v, waiters %+v; want none", st.Holders, st.Waiters)
	}
	ttl := max(h.Caps().ttl(), 5*time.Second)
	from := time.Now()
	lease := mustLock(t, a, k, lock.WithTTL(ttl), lock.WithDisableAutoRenew(true))
	to := time.Now()
	before := dump(t, h, k)
	st := inspect(t, b, ic, k)
	assertUnchanged(t, h, k, before, "Inspect of a held key")
	if len(st.Holders) != 1 {
		t.Fatalf("a held key: holders %+v; want the lease's grant alone", st.Holders)
	}
	checkHolder(t, ic, st, st.Holders[0], lease, lock.Exclusive, ttl, from, to)
	if len(st.Waiters) > 0 {
		t.Errorf("waiters %+v; nobody waits", st.Waiters)
	}
	if err := lease.Err(); err != nil {
		t.Fatalf("the lease ended while inspected: %v", err)
	}
	assertHeld(t, b, k, "the inspected lease")
	if err := lease.Unlock(ctx(t, 10*time.Second)); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if st := inspect(t, b, ic, k); st.Held() {
		t.Errorf("a released key: holders %+v; want none", st.Holders)
	}

	if h.Caps().Reentry {
		const id = "conformance-inspect"
		first := mustLock(t, a, k, lock.WithOwner(id), lock.WithTTL(ttl), lock.WithDisableAutoRenew(true))
		second := mustLock(t, b, k, lock.WithOwner(id), lock.WithTTL(ttl), lock.WithDisableAutoRenew(true))
		before := dump(t, h, k)
		st := inspect(t, b, ic, k)
		assertUnchanged(t, h, k, before, "Inspect of a named owner's grant")
		want := lock.Holder{Owner: lock.Owner(id), Holds: 2, Mode: lock.Exclusive, Token: first.Token()}
		if len(st.Holders) != 1 {
			t.Fatalf("a named owner's grant with two holds: holders %+v; want one", st.Holders)
		}
		got := st.Holders[0]
		if got.Owner != want.Owner || got.Holds != 2 || got.Mode != want.Mode || got.Token != want.Token || got.Foreign {
			t.Errorf("a named owner's grant: %+v; want owner %s, 2 holds, exclusive, token %d", got, want.Owner, want.Token)
		}
		first.Unlock(ctx(t, 10*time.Second))
		if st := inspect(t, a, ic, k); len(st.Holders) != 1 || st.Holders[0].Holds != 1 {
			t.Errorf("after one of two holds was released: holders %+v; want one with one hold", st.Holders)
		}
		second.Unlock(ctx(t, 10*time.Second))
	}
	assertNoResidue(t, h, k)
}

// Inspect/Shared: readers and permits are listed one holder each, with
// their mode, limit and owner (and token, remaining time and grant time
// where the backend tells), and Inspect changes nothing.
func testInspectShared(t *testing.T, h Harness) {
	ic := inspectCaps(t, h)
	if !h.Caps().Shared && !h.Caps().Permits {
		t.Skip("the driver grants no shared leases nor permits")
	}
	ttl := max(h.Caps().ttl(), 5*time.Second)
	opts := []lock.Option{lock.WithTTL(ttl), lock.WithDisableAutoRenew(true)}
	viewer := h.NewLocker(t, nil)
	check := func(k string, mode lock.Mode, leases []*lock.Lease, from, to time.Time) {
		t.Helper()
		before := dump(t, h, k)
		st := inspect(t, viewer, ic, k)
		assertUnchanged(t, h, k, before, fmt.Sprintf("Inspect of %v holders", mode))
		if len(st.Holders) != len(leases) {
			t.Fatalf("%d %v leases: holders %+v", len(leases), mode, st.Holders)
		}
		for _, l := range leases {
			i := slices.IndexFunc(st.Holders, func(hd lock.Holder) bool { return hd.Owner == ownerOf(t, l) })
			if i < 0 {
				t.Errorf("the %v lease of owner %s is not among the holders %+v", mode, ownerOf(t, l), st.Holders)
				continue
			}
			checkHolder(t, ic, st, st.Holders[i], l, mode, ttl, from, to)
		}
		for _, l := range leases {
			if err := l.Unlock(ctx(t, 10*time.Second)); err != nil {
				t.Errorf("Unlock: %v", err)
			}
		}
		if st := inspect(t, viewer, ic, k); st.Held() {
			t.Errorf("after every %v lease was released: holders %+v", mode, st.Holders)
		}
		assertNoResidue(t, h, k)
	}
	if h.Caps().Shared {
		k := key(t)
		var leases []*lock.Lease
		from := time.Now()
		for range 2 {
			rw := h.NewLocker(t, nil)
			l, err := rw.RLock(ctx(t, 10*time.Second), k, opts...)
			if err != nil {
				t.Fatalf("RLock: %v", err)
			}
			leases = append(leases, l)
		}
		check(k, lock.Shared, leases, from, time.Now())
	}
	if h.Caps().Permits {
		k := key(t)
		var leases []*lock.Lease
		from := time.Now()
		for range 2 {
			sl := h.NewLocker(t, nil)
			err := sl.Supports(lock.Permits)
			if err != nil {
				t.Fatalf("Caps.Permits is set but: %v", err)
			}
			leases = append(leases, mustAcquire(t, sl, k, 3, opts...))
		}
		check(k, lock.Permit, leases, from, time.Now())
	}
}

// Inspect/Expired: a grant whose TTL has passed is not listed, and
// Inspect does not clean it up: the backend's state is as before, also
// where the expired grant is a reader's or a permit's that the key's
// other, live, grants keep on the backend.
func testInspectExpired(t *testing.T, h Harness) {
	ic := inspectCaps(t, h)
	if h.Caps().SessionBound {
		t.Skip("grants last as long as their session, not a TTL")
	}
	viewer := h.NewLocker(t, nil)
	ttl := h.Caps().ttl()
	short := []lock.Option{lock.WithTTL(ttl), lock.WithDisableAutoRenew(true)}
	long := []lock.Option{lock.WithTTL(4 * ttl), lock.WithDisableAutoRenew(true)}
	type grants struct {
		k           string
		gone, alive *lock.Lease
	}
	var gs []grants
	k := key(t)
	// The holders of the grants that expire crash: no release or clean-up
	// of theirs reaches the backend, which keeps what it keeps of them.
	crashed := h.NewLocker(t, nil)
	gs = append(gs, grants{k: k, gone: mustLock(t, crashed, k, short...)})
	if h.Caps().Shared {
		k := key(t)
		g := grants{k: k}
		for i, opts := range [][]lock.Option{short, long} {
			locker := h.NewLocker(t, nil)
			if i == 0 {
				locker = crashed
			}
			l, err := locker.RLock(ctx(t, 10*time.Second), k, opts...)
			if err != nil {
				t.Fatalf("RLock %d: %v", i, err)
			}
			if i == 0 {
				g.gone = l
			} else {
				g.alive = l
			}
		}
		gs = append(gs, g)
	}
	if h.Caps().Permits {
		k := key(t)
		g := grants{k: k}
		for i, opts := range [][]lock.Option{short, long} {
			locker := h.NewLocker(t, nil)
			if i == 0 {
				locker = crashed
			}
			sl := locker
			err := sl.Supports(lock.Permits)
			if err != nil {
				t.Fatalf("Caps.Permits is set but: %v", err)
			}
			l := mustAcquire(t, sl, k, 2, opts...)
			if i == 0 {
				g.gone = l
			} else {
				g.alive = l
			}
		}
		gs = append(gs, g)
	}
	h.Crash(t, crashed)
	time.Sleep(ttl + 100*time.Millisecond + ic.ExpiryLag)
	for _, g := range gs {
		if !closedWithin(g.gone.Done(), 0) {
			t.Fatalf("a lease is not over after its TTL")
		}
		before := dump(t, h, g.k)
		st := inspect(t, viewer, ic, g.k)
		assertUnchanged(t, h, g.k, before, "Inspect of an expired grant")
		switch {
		case g.alive == nil && st.Held():
			t.Errorf("a grant past its TTL is listed: %+v", st.Holders)
		case g.alive != nil && (len(st.Holders) != 1 || st.Holders[0].Owner != ownerOf(t, g.alive)):
			t.Errorf("an expired grant beside a live one: holders %+v; want the live one (owner %s) alone", st.Holders, ownerOf(t, g.alive))
		}
		if g.alive != nil {
			g.alive.Unlock(ctx(t, 10*time.Second))
		}
	}
}

// Inspect/Waiters: waiters queued behind a holder are listed in the order
// they will be served, with their owner (the one their lease gets), mode,
// limit and, where the backend tells, when they joined; drivers whose
// backend keeps no queue say so. Inspect moves no waiter: each gets the
// key in its turn.
func testInspectWaiters(t *testing.T, h Harness) {
	ic := inspectCaps(t, h)
	holder, viewer := h.NewLocker(t, nil), h.NewLocker(t, nil)
	k := key(t)
	lease := mustLock(t, holder, k)
	type waiter struct {
		mode  lock.Mode
		limit int
		from  time.Time
		got   chan *lock.Lease
	}
	var ws []*waiter
	start := func(mode lock.Mode, limit int) {
		l := h.NewLocker(t, nil)
		w := &waiter{mode: mode, limit: limit, from: time.Now(), got: make(chan *lock.Lease, 1)}
		ws = append(ws, w)
		go func() {
			var lease *lock.Lease
			var err error
			c := ctx(t, 60*time.Second)
			switch mode {
			case lock.Shared:
				lease, err = l.RLock(c, k)
			case lock.Permit:
				lease, err = l.Acquire(c, k, limit)
			default:
				lease, err = l.Lock(c, k)
			}
			if err != nil {
				t.Errorf("waiter (%v): %v", mode, err)
			}
			w.got <- lease
		}()
	}
	// Each waiter starts once the one before is queued, so that the order
	// is known.
	waitFor := func(n int) *lock.KeyState {
		t.Helper()
		var st *lock.KeyState
		for deadline := time.Now().Add(10 * time.Second); ; {
			st = inspect(t, viewer, ic, k)
			if len(st.Waiters) >= n || time.Now().After(deadline) {
				return st
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	start(lock.Exclusive, 0)
	if !ic.Waiters {
		time.Sleep(200 * time.Millisecond) // the waiter polls meanwhile
		st := inspect(t, viewer, ic, k)
		if len(st.Waiters) > 0 || len(st.Holders) != 1 || st.Holders[0].Owner != ownerOf(t, lease) {
			t.Errorf("with a waiter polling: holders %+v, waiters %+v; want the holder alone", st.Holders, st.Waiters)
		}
		lease.Unlock(ctx(t, 10*time.Second))
		if l := <-ws[0].got; l != nil {
			l.Unlock(ctx(t, 10*time.Second))
		}
		assertNoResidue(t, h, k)
		return
	}
	waitFor(1)
	if h.Caps().Shared {
		start(lock.Shared, 0)
		waitFor(len(ws))
	}
	if h.Caps().Permits {
		start(lock.Permit, 2)
		waitFor(len(ws))
	}
	residue, err := h.Residue(ctx(t, 10*time.Second), k)
	if err != nil {
		t.Fatalf("Residue: %v", err)
	}
	st := waitFor(len(ws))
	if again, err := h.Residue(ctx(t, 10*time.Second), k); err != nil || !slices.Equal(residue, again) {
		t.Errorf("Inspect with waiters changed the backend's names: %q, then %q (%v)", residue, again, err)
	}
	if len(st.Holders) != 1 || st.Holders[0].Owner != ownerOf(t, lease) {
		t.Errorf("holders %+v; want the lease's grant alone", st.Holders)
	}
	if len(st.Waiters) != len(ws) {
		t.Fatalf("%d waiters queued: Inspect lists %+v", len(ws), st.Waiters)
	}
	for i, w := range st.Waiters {
		want := ws[i]
		if w.Mode != want.mode || w.Limit != want.limit || len(w.Owner) != 32 {
			t.Errorf("waiter %d: %+v; want %v, limit %d, a 32-digit owner", i, w, want.mode, want.limit)
		}
		switch {
		case ic.WaiterSince && (w.Since.Before(want.from.Add(-sinceSlack)) || w.Since.After(time.Now().Add(sinceSlack))):
			t.Errorf("waiter %d since %v; it started waiting at %v", i, w.Since, want.from)
		case !ic.WaiterSince && (!w.Since.IsZero() || !st.Unknown.Since):
			t.Errorf("waiter %d since %v (Unknown.Since %v) on a driver that cannot tell it", i, w.Since, st.Unknown.Since)
		}
	}
	// Each waiter gets the key in its turn, as the owner listed.
	if err := lease.Unlock(ctx(t, 10*time.Second)); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	for i, w := range ws {
		select {
		case l := <-w.got:
			if l == nil {
				t.FailNow()
			}
			if ownerOf(t, l) != st.Waiters[i].Owner {
				t.Errorf("waiter %d was granted as owner %s; Inspect listed %s", i, ownerOf(t, l), st.Waiters[i].Owner)
			}
			if err := l.Unlock(ctx(t, 10*time.Second)); err != nil {
				t.Errorf("Unlock: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("waiter %d (%v) not granted in its turn", i, w.mode)
		}
	}
	assertNoResidue(t, h, k)
}
