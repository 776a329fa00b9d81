package postgres

import (
	"testing"
	"time"
)

// TestAudit41ColdLockRidesOut: a Locker's first Lock, made while the
// server is cut off, fails at reading the schema, so its Join sends no
// step (notSent) yet is ridden out as a held key; once the server is back
// the wait's next step must still queue it and grant the free key.
func TestAudit41ColdLockRidesOut(t *testing.T) {
	url := serverURL(t)
	cut := &netCut{}
	cut.setDown(true)
	l := newLockerWith(t, url, nil, cut)
	key := auditKey("audit41-cold")
	ctx := tctx(t, 60*time.Second)
	type res struct {
		took time.Duration
		err  error
	}
	done := make(chan res, 1)
	start := time.Now()
	go func() {
		ls, err := l.Lock(ctx, key)
		if err == nil {
			err = ls.Unlock(ctx)
		}
		done <- res{time.Since(start), err}
	}()
	time.Sleep(2 * time.Second)
	cut.setDown(false)
	back := time.Now()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("Lock after the server came back: %v", r.err)
		}
		t.Logf("granted %v after the server came back", time.Since(back))
	case <-time.After(20 * time.Second):
		t.Fatal("Lock still waits 20 s after the server came back, the key free")
	}
}
