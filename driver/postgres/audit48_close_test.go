package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// TestAudit48CloseHeldNetwork: Close of a Locker whose listener and pool
// reach the server through a network that holds everything returns within
// its bound (ReleaseTimeout and a margin), pgx's drains not waited for.
func TestAudit48CloseHeldNetwork(t *testing.T) {
	url := serverURL(t)
	ctx := context.Background()
	holder := newTestLocker(t, url, nil, &netCut{})
	px := newPGProxy(t, serverAddr(t, url))
	l := openProxied(t, url, px, 2)
	busy := auditKey("audit48-close-busy")
	lh, err := holder.Lock(ctx, busy)
	if err != nil {
		t.Fatal(err)
	}
	defer lh.Unlock(ctx)
	mine, err := l.Lock(ctx, auditKey("audit48-close-mine"))
	if err != nil {
		t.Fatal(err)
	}
	_ = mine
	wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond) // starts the listener
	if _, err := l.Lock(wctx, busy); err == nil {
		t.Fatal("granted a held key")
	}
	cancel()
	time.Sleep(200 * time.Millisecond)
	px.holdAll()
	start := time.Now()
	l.Close()
	if took := time.Since(start); took > lock.DefaultReleaseTimeout+3*time.Second {
		t.Fatalf("Close behind a held network took %v", took)
	} else {
		t.Logf("Close took %v", took)
	}
	px.deliver()
}
