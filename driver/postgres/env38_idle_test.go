package postgres

import (
	"testing"
	"time"
)

// TestEnv38IdleSessionTimeout: a database's idle_session_timeout closes
// the pool's idle connections on the server; a queued Lock whose next
// step meets such a connection rides it out, and every call works.
func TestEnv38IdleSessionTimeout(t *testing.T) {
	url := envDB(t, "env38_idle_session", "idle_session_timeout=300ms")
	ctx := tctx(t, 60*time.Second)
	a := newTestLocker(t, url, nil, &netCut{})
	w := newTestLocker(t, url, nil, &netCut{})
	key := auditKey("env38-idle-session")
	held, err := a.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	res := make(chan error, 1)
	go func() {
		l, err := w.Lock(ctx, key) // steps every second: each time on a connection the server closed
		if err == nil {
			err = l.Unlock(ctx)
		}
		res <- err
	}()
	time.Sleep(3500 * time.Millisecond)
	select {
	case err := <-res:
		t.Fatalf("the queued Lock ended while the key was held: %v", err)
	default:
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	select {
	case err := <-res:
		if err != nil {
			t.Fatalf("the queued Lock: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the queued Lock was not granted 20 s after the release")
	}
	time.Sleep(700 * time.Millisecond)
	contend(t, url, Options{})
}
