package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// Attacks on the inline (Caps.ReturnsAtContextEnd) calls: a request held on the
// network, the caller's context cancelled (not a deadline). C7: the call
// returns when its context ends, and leaves nothing behind.

const promptBound = 150 * time.Millisecond

// heldCall starts a locker whose one connection is established, holds
// every byte it sends from now on, runs call with a cancellable context,
// cancels it once the request is on the network, and returns the call's
// error and how long it took to return after cancel.
func heldCall(t *testing.T, px interface {
	holdAll()
	heldBytes() int
}, call func(ctx context.Context) error) (time.Duration, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	px.holdAll()
	res := make(chan error, 1)
	go func() { res <- call(ctx) }()
	waitFor(t, "the request on the network", 3*time.Second, func() bool { return px.heldBytes() > 0 })
	time.Sleep(50 * time.Millisecond)
	t.Logf("held bytes at cancel: %d", px.heldBytes())
	start := time.Now()
	cancel()
	select {
	case err := <-res:
		return time.Since(start), err
	case <-time.After(10 * time.Second):
		t.Fatalf("the call did not return 10 s after its context was cancelled")
		return 0, nil
	}
}

func warm(t *testing.T, l *lock.Locker) {
	t.Helper()
	ctx := context.Background()
	w, err := l.Lock(ctx, auditKey("audit31-warm"))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// TryLock's statement too, so that the held request is a whole
	// execution (not a Parse of an uncached statement).
	w, err = l.TryLock(ctx, auditKey("audit31-warm"))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// freeWithin checks another client gets key within d (well under the TTL).
func freeWithin(t *testing.T, other *lock.Locker, key string, d time.Duration) {
	t.Helper()
	end := time.Now().Add(d)
	for {
		l, err := other.TryLock(context.Background(), key)
		if err == nil {
			l.Unlock(context.Background())
			return
		}
		if time.Now().After(end) {
			t.Fatalf("key %s still taken %v after the cancelled call (TTL 30 s): %v", key, d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestAudit31CancelHeldAcquire(t *testing.T) {
	for _, tc := range []struct {
		name string
		try  bool
	}{{"Lock", false}, {"TryLock", true}} {
		t.Run(tc.name, func(t *testing.T) {
			url := serverURL(t)
			other := newTestLocker(t, url, nil, &netCut{})
			px := newPGProxy(t, serverAddr(t, url))
			b := proxiedLocker(t, url, px, 1, nil)
			warm(t, b)
			key := auditKey("audit31-acq-" + tc.name)
			took, err := heldCall(t, px, func(ctx context.Context) error {
				var l *lock.Lease
				var err error
				if tc.try {
					l, err = b.TryLock(ctx, key, lock.WithTTL(30*time.Second))
				} else {
					l, err = b.Lock(ctx, key, lock.WithTTL(30*time.Second))
				}
				if err == nil {
					l.Unlock(context.Background())
					return errors.New("granted through a held request")
				}
				return err
			})
			t.Logf("%s returned %v after cancel: %v", tc.name, took, err)
			if took > promptBound {
				t.Errorf("%s returned %v after its context was cancelled, want <= %v", tc.name, took, promptBound)
			}
			if !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
				t.Errorf("%s: %v, want ErrNotAcquired and context.Canceled", tc.name, err)
			}
			// The held request reaches the server now and grants.
			time.Sleep(200 * time.Millisecond)
			raw := rawPool(t, url)
			var voids int
			if err := raw.QueryRow(context.Background(), "SELECT count(*) FROM dlock.voids WHERE key = $1", key).Scan(&voids); err != nil {
				t.Fatal(err)
			}
			t.Logf("before deliver: entries %q, voids %d", entriesOf(t, raw, "dlock", key), voids)
			px.deliver()
			seen := false
			for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
				if e := entriesOf(t, raw, "dlock", key); len(e) > 0 {
					if !seen {
						t.Logf("after deliver, the held request left: %q", e)
					}
					seen = true
				}
			}
			if seen {
				t.Errorf("the held request left an entry on the server after its caller gave up")
			}
			freeWithin(t, other, key, 5*time.Second)
		})
	}
}

func TestAudit31CancelHeldUnlock(t *testing.T) {
	url := serverURL(t)
	other := newTestLocker(t, url, nil, &netCut{})
	px := newPGProxy(t, serverAddr(t, url))
	b := proxiedLocker(t, url, px, 1, nil)
	key := auditKey("audit31-unlock")
	l, err := b.Lock(context.Background(), key, lock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	took, err := heldCall(t, px, func(ctx context.Context) error { return l.Unlock(ctx) })
	t.Logf("Unlock returned %v after cancel: %v", took, err)
	if took > promptBound {
		t.Errorf("Unlock returned %v after cancel, want <= %v", took, promptBound)
	}
	time.Sleep(200 * time.Millisecond)
	px.deliver()
	freeWithin(t, other, key, 8*time.Second)
}

func TestAudit31CancelHeldRefresh(t *testing.T) {
	url := serverURL(t)
	other := newTestLocker(t, url, nil, &netCut{})
	px := newPGProxy(t, serverAddr(t, url))
	b := proxiedLocker(t, url, px, 1, &Options{Options: lock.Options{DisableAutoRenew: true}})
	key := auditKey("audit31-refresh")
	l, err := b.Lock(context.Background(), key, lock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	took, err := heldCall(t, px, func(ctx context.Context) error { return l.Refresh(ctx, 30*time.Second) })
	t.Logf("Refresh returned %v after cancel: %v", took, err)
	if took > promptBound {
		t.Errorf("Refresh returned %v after cancel, want <= %v", took, promptBound)
	}
	px.deliver()
	// Still able to unlock and free the key.
	uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	uerr := l.Unlock(uctx)
	t.Logf("Unlock after the cancelled Refresh: %v", uerr)
	freeWithin(t, other, key, 8*time.Second)
}

// Close while an inline Lock is held on the network: Close returns within
// ReleaseTimeout (plus slack), the Lock returns with ErrClosed, and the key
// is left free.
func TestAudit31CloseDuringHeldLock(t *testing.T) {
	url := serverURL(t)
	other := newTestLocker(t, url, nil, &netCut{})
	px := newPGProxy(t, serverAddr(t, url))
	const rt = 1 * time.Second
	b := proxiedLocker(t, url, px, 1, &Options{Options: lock.Options{ReleaseTimeout: rt}})
	warm(t, b)
	key := auditKey("audit31-close")
	px.holdAll()
	res := make(chan error, 1)
	go func() {
		l, err := b.Lock(context.Background(), key, lock.WithTTL(30*time.Second))
		if err == nil {
			err = errors.New("granted")
			_ = l
		}
		res <- err
	}()
	waitFor(t, "the request on the network", 3*time.Second, func() bool { return px.heldBytes() > 0 })
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	cerr := make(chan error, 1)
	go func() { cerr <- b.Close() }()
	select {
	case err := <-res:
		t.Logf("Lock returned %v after Close began: %v", time.Since(start), err)
		if !errors.Is(err, lock.ErrClosed) || !errors.Is(err, lock.ErrNotAcquired) {
			t.Errorf("Lock during Close: %v, want ErrClosed and ErrNotAcquired", err)
		}
		if d := time.Since(start); d > promptBound {
			t.Errorf("Lock returned %v after Close began, want <= %v", d, promptBound)
		}
	case <-time.After(rt + 5*time.Second):
		t.Fatalf("Lock did not return %v after Close began", rt+5*time.Second)
	}
	select {
	case err := <-cerr:
		d := time.Since(start)
		t.Logf("Close returned %v: %v", d, err)
		if d > rt+500*time.Millisecond {
			t.Errorf("Close took %v, want <= ReleaseTimeout %v (+500ms)", d, rt)
		}
	case <-time.After(rt + 10*time.Second):
		t.Fatalf("Close did not return %v after it began (ReleaseTimeout %v)", rt+10*time.Second, rt)
	}
	px.deliver()
	time.Sleep(300 * time.Millisecond)
	freeWithin(t, other, key, 8*time.Second)
}
