package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// TestAudit44PGJoinRequestHeld: a queued Lock's Join is held in the
// network (its reply never comes) while another holds the key. Since
// d39828f a held Join answer is not ridden; here there is no answer at
// all: the Lock must end with its context (not hang), and once the held
// Join reaches the server late, it leaves no entry behind: the key is
// free for a TryLock after the holder's release, not handed to the
// waiter that gave up.
func TestAudit44PGJoinRequestHeld(t *testing.T) {
	ctx := tctx(t, time.Minute)
	url := serverURL(t)
	raw := rawPool(t, url)
	a, _ := driverLocker(t, url, nil)
	p := newPGProxy(t, serverAddr(t, url))
	b := proxiedLocker(t, url, p, 4, nil)
	c, _ := driverLocker(t, url, nil)
	for round := range 3 {
		key := auditKey(fmt.Sprintf("audit44-joinheld-%d", round))
		la, err := a.TryLock(ctx, key, lock.WithTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.TryLock(ctx, key); !errors.Is(err, lock.ErrHeld) { // b's connections made
			t.Fatalf("b's TryLock of a held key: %v", err)
		}
		p.holdAll()
		bctx, cancel := context.WithTimeout(ctx, time.Second)
		done := make(chan error, 1)
		go func() {
			ls, err := b.Lock(bctx, key)
			if ls != nil {
				ls.Unlock(ctx)
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, lock.ErrNotAcquired) {
				t.Fatalf("b's Lock whose Join got no reply: %v; want its context's end", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("b's Lock whose Join got no reply hangs past its context's end")
		}
		cancel()
		if p.heldBytes() == 0 {
			t.Fatal("nothing of b's Join was held")
		}
		p.deliver() // the late Join lands
		// Until the late step has run (its session gone), then some more.
		waitFor(t, "the late Join to run", 20*time.Second, func() bool {
			var n int
			raw.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE '%lock3%' AND pid <> pg_backend_pid()").Scan(&n)
			return n == 0
		})
		time.Sleep(200 * time.Millisecond)
		if got := entriesOf(t, raw, DefaultSchema, key); len(got) != 1 {
			t.Errorf("round %d: after b's late Join: %q; want a's grant alone", round, got)
		}
		if err := la.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		lc, err := c.TryLock(ctx, key)
		if err != nil {
			t.Fatalf("round %d: a TryLock after the holder's release, b having given up: %v (entries %q)", round, err, entriesOf(t, raw, DefaultSchema, key))
		}
		lc.Unlock(ctx)
	}
}

// TestAudit44PGJoinHeldWakeLost: a Lock's Join finds the key held for
// 30 s more (its answer: free in 30 s, no longer 100 ms since d39828f);
// the waiter's listener session is then terminated and the holder
// releases: the waiter's wake is lost. The waiter must still get the key
// soon (its Heartbeat Check), not after the holder's 30 s.
func TestAudit44PGJoinHeldWakeLost(t *testing.T) {
	for _, how := range []string{"listener-killed", "no-notify"} {
		t.Run(how, func(t *testing.T) { joinHeldWakeLost(t, how) })
	}
}

// joinHeldWakeLost: how the wake is lost: the listener's session is
// terminated (it reconnects), or the waiter's entry names no channel
// (no NOTIFY is sent at all).
func joinHeldWakeLost(t *testing.T, how string) {
	ctx := tctx(t, time.Minute)
	url := serverURL(t)
	raw := rawPool(t, url)
	a, _ := driverLocker(t, url, nil)
	app := "audit44-wakelost-" + how
	b, _ := driverLocker(t, withAppName(t, url, app), nil)
	key := auditKey("audit44-wakelost")
	la, err := a.TryLock(ctx, key, lock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	type res struct {
		ls  *lock.Lease
		err error
	}
	got := make(chan res, 1)
	go func() {
		ls, err := b.Lock(ctx, key)
		got <- res{ls, err}
	}()
	waitFor(t, "b queued", 20*time.Second, func() bool { return len(entriesOf(t, raw, DefaultSchema, key)) == 2 })
	if how == "no-notify" {
		execAll(t, raw, "UPDATE dlock.entries SET chan = '' WHERE key = '"+key+"'")
	} else if _, err := raw.Exec(ctx, "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity WHERE application_name = $1", app); err != nil {
		// b's sessions: its listener (idle, LISTENing) among them.
		t.Fatal(err)
	}
	start := time.Now()
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("b's Lock: %v", r.err)
		}
		t.Logf("b granted %v after the release", time.Since(start))
		r.ls.Unlock(ctx)
	case <-time.After(15 * time.Second):
		t.Fatal("b still waits 15 s after the release whose wake it lost (its Join said: free in 30 s)")
	}
}

// TestAudit44PGTerminateHandOvers: four Lockers contend with Lock on
// one key (grants of 1 s, so that a holder cut off loses its row grant
// and the next waiter is handed the key on expiry), while their server
// sessions are terminated (pg_terminate_backend) every 100-250 ms, in
// mid-step. No grant overlaps one whose lease is still valid on its
// holder (Done not closed), and tokens rise.
func TestAudit44PGTerminateHandOvers(t *testing.T) {
	ctx := tctx(t, time.Minute)
	url := serverURL(t)
	raw := rawPool(t, url)
	key := auditKey("audit44-kill")
	x := newExcl44(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var errs atomic.Int64
	apps := make([]string, 4)
	for i := range apps {
		apps[i] = fmt.Sprintf("audit44-kill-%d-%s", i, key[len(key)-6:])
		l, _ := driverLocker(t, withAppName(t, url, apps[i]), nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				c, cancel := context.WithTimeout(ctx, 5*time.Second)
				ls, err := l.Lock(c, key, lock.WithTTL(time.Second))
				cancel()
				if err != nil {
					errs.Add(1)
					time.Sleep(10 * time.Millisecond)
					continue
				}
				who := fmt.Sprintf("%d #%d", i, n)
				x.enter(who, int64(ls.Token()), ls.Done())
				// Sometimes outlive the grant's TTL (renewals may fail under the kills).
				d := time.Duration(rand.IntN(20)) * time.Millisecond
				if rand.IntN(10) == 0 {
					d = 1200 * time.Millisecond
				}
				select {
				case <-time.After(d):
				case <-ls.Done():
				}
				x.exit(who)
				ls.Unlock(ctx)
			}
		}()
	}
	end := time.Now().Add(8 * time.Second)
	kills := 0
	for time.Now().Before(end) {
		time.Sleep(time.Duration(100+rand.IntN(150)) * time.Millisecond)
		raw.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", apps[rand.IntN(len(apps))])
		kills++
	}
	close(stop)
	wg.Wait()
	t.Logf("%d grants, %d failed Locks, %d kills", x.grants.Load(), errs.Load(), kills)
	if x.grants.Load() < 10 {
		t.Errorf("only %d grants", x.grants.Load())
	}
}

// TestAudit44PGJoinReplyLost: a queued Lock's Join runs on the server
// and commits its entry, but its reply is lost (the client's connections
// are cut while the Join waits for the key's row, which the test then
// frees). The Join's connection failure is ridden out (a HeldError of
// rideRetry), unlike a held answer since d39828f. Either the network
// comes back before the Lock's context ends (back) or after (late):
// the Lock ends with its context, and b's entry is gone (Leave, or its
// life), so the holder's release is not handed to a waiter that left.
func TestAudit44PGJoinReplyLost(t *testing.T) {
	for _, when := range []string{"back", "late"} {
		t.Run(when, func(t *testing.T) { joinReplyLost(t, when) })
	}
}

func joinReplyLost(t *testing.T, when string) {
	ctx := tctx(t, time.Minute)
	url := serverURL(t)
	raw := rawPool(t, url)
	a, _ := driverLocker(t, url, nil)
	cut := &netCut{}
	b := newTestLocker(t, url, nil, cut)
	c, _ := driverLocker(t, url, nil)
	key := auditKey("audit44-replylost-" + when)
	la, err := a.TryLock(ctx, key, lock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryLock(ctx, key); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("b's TryLock of a held key: %v", err)
	}
	row, err := raw.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := row.Exec(ctx, "SELECT 1 FROM dlock.keys WHERE key = $1 FOR UPDATE", key); err != nil {
		t.Fatal(err)
	}
	bctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		ls, err := b.Lock(bctx, key)
		if ls != nil {
			ls.Unlock(ctx)
		}
		done <- err
	}()
	waitFor(t, "b's Join waiting for the key's row", 20*time.Second, func() bool {
		var n int
		raw.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%lock3%'").Scan(&n)
		return n > 0
	})
	cut.setDown(true)
	row.Rollback(ctx) // the Join goes on, commits its entry, and its reply is lost
	waitFor(t, "b's entry", 20*time.Second, func() bool { return len(entriesOf(t, raw, DefaultSchema, key)) == 2 })
	if when == "back" {
		time.Sleep(500 * time.Millisecond)
		cut.setDown(false)
	}
	select {
	case err := <-done:
		if err == nil || !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, lock.ErrNotAcquired) && !errors.Is(err, lock.ErrUnavailable) {
			t.Fatalf("b's Lock whose Join reply was lost: %v; want its context's end", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("b's Lock whose Join reply was lost hangs past its context's end")
	}
	cut.setDown(false)
	ended := time.Now()
	waitFor(t, "b's entry gone", 20*time.Second, func() bool { return len(entriesOf(t, raw, DefaultSchema, key)) == 1 })
	t.Logf("b's entry gone %v after its Lock ended", time.Since(ended))
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lc, err := c.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("a TryLock after the holder's release, b having given up: %v (entries %q)", err, entriesOf(t, raw, DefaultSchema, key))
	}
	lc.Unlock(ctx)
}

// TestAudit44PGExpiredRowGrantDone: a holder of a 1 s row grant is cut
// off (its connections dropped, its server sessions terminated, so its
// renewals fail) while a waiter is queued. The waiter is handed the key
// once the row grant expires (begin_key3's purge, written out in
// version 8), with a higher token, and never before the cut holder's
// Done has closed.
func TestAudit44PGExpiredRowGrantDone(t *testing.T) {
	ctx := tctx(t, time.Minute)
	url := serverURL(t)
	raw := rawPool(t, url)
	for round := range 3 {
		app := fmt.Sprintf("audit44-expire-%d", round)
		cut := &netCut{}
		a := newTestLocker(t, withAppName(t, url, app), nil, cut)
		b, _ := driverLocker(t, url, nil)
		key := auditKey("audit44-expire")
		la, err := a.Lock(ctx, key, lock.WithTTL(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan *lock.Lease, 1)
		go func() {
			ls, err := b.Lock(ctx, key, lock.WithTTL(10*time.Second))
			if err != nil {
				t.Error(err)
			}
			got <- ls
		}()
		waitFor(t, "b queued", 20*time.Second, func() bool { return len(entriesOf(t, raw, DefaultSchema, key)) == 2 })
		cut.setDown(true)
		terminateApp(t, raw, app)
		// b is woken every 20 ms, so that it steps as soon as a step could
		// grant it (a wake grants nothing by itself).
		var lb *lock.Lease
		for lb == nil {
			raw.Exec(ctx, "SELECT pg_notify(chan, owner) FROM dlock.entries WHERE key = $1 AND chan <> ''", key)
			select {
			case lb = <-got:
				if lb == nil {
					return
				}
			case <-time.After(20 * time.Millisecond):
			}
		}
		if lb == nil {
			return
		}
		select {
		case <-la.Done():
		default:
			t.Errorf("round %d: b granted while the cut holder's lease is still valid (deadline %v, now %v)", round, la.Deadline(), time.Now())
		}
		if lb.Token() <= la.Token() {
			t.Errorf("round %d: b's token %d not above the expired holder's %d", round, lb.Token(), la.Token())
		}
		lb.Unlock(ctx)
	}
}

// TestAudit44PGJoinRequestDelayed: a queued Lock's Join is held in the
// network for a second while the holder releases, then delivered: the
// Lock, whose context lasts, still waits for it and is granted, with a
// token above the holder's; the key's row holds its grant alone.
func TestAudit44PGJoinRequestDelayed(t *testing.T) {
	ctx := tctx(t, time.Minute)
	url := serverURL(t)
	raw := rawPool(t, url)
	a, _ := driverLocker(t, url, nil)
	p := newPGProxy(t, serverAddr(t, url))
	b := proxiedLocker(t, url, p, 4, nil)
	key := auditKey("audit44-joindelay")
	la, err := a.TryLock(ctx, key, lock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryLock(ctx, key); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("b's TryLock of a held key: %v", err)
	}
	p.holdAll()
	type res struct {
		ls  *lock.Lease
		err error
	}
	got := make(chan res, 1)
	go func() {
		ls, err := b.Lock(ctx, key)
		got <- res{ls, err}
	}()
	waitFor(t, "b's Join held", 20*time.Second, func() bool { return p.heldBytes() > 0 })
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	select {
	case r := <-got:
		t.Fatalf("b's Lock returned before its Join reached the server: %v", r.err)
	default:
	}
	p.deliver()
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("b's Lock after its delayed Join: %v", r.err)
		}
		if r.ls.Token() <= la.Token() {
			t.Errorf("b's token %d not above a's %d", r.ls.Token(), la.Token())
		}
		if e := entriesOf(t, raw, DefaultSchema, key); len(e) != 1 {
			t.Errorf("entries with b granted: %q; want b's row grant alone", e)
		}
		r.ls.Unlock(ctx)
	case <-time.After(20 * time.Second):
		t.Fatal("b's Lock still waits 20 s after its delayed Join was delivered, the key free")
	}
}
