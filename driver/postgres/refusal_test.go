package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
)

// TestWrongPasswordNotOutage: a wrong password is a misconfiguration, not
// an unreachable server: TryLock does not say ErrUnavailable, and a
// waiting Lock fails at once instead of waiting for its context.
func TestWrongPasswordNotOutage(t *testing.T) {
	pg := testserver.SharedPostgres(t)
	l := newLockerWith(t, pg.NodeURLFor(0, pg.User, pg.Password+"-wrong"), nil, &netCut{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := auditKey("wrongpass")
	_, err := l.TryLock(ctx, key)
	t.Logf("TryLock: %v", err)
	if err == nil || errors.Is(err, lock.ErrUnavailable) {
		t.Errorf("TryLock with a wrong password: %v; want a refusal, not ErrUnavailable", err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	start := time.Now()
	_, err = l.Lock(wctx, key)
	took := time.Since(start)
	t.Logf("Lock: %v after %v", err, took)
	if err == nil || took > 5*time.Second || errors.Is(err, lock.ErrUnavailable) {
		t.Errorf("Lock with a wrong password: %v after %v; want a prompt refusal", err, took)
	}
}
