package postgres

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// TestAudit41LockOutageErrorSaysUnavailable: lock's outage rule says a
// waiting call whose context ends during an outage returns an error
// wrapping ErrNotAcquired, the context's error and ErrUnavailable with
// the backend's last error. A queued postgres Lock rides the first 15 s
// of failures out inside the driver as a held key (ride.go), so a Lock
// whose context ends within them says only "context deadline exceeded".
func TestAudit41LockOutageErrorSaysUnavailable(t *testing.T) {
	if os.Getenv("DLOCK_AUDIT_OPEN") != "1" {
		t.Skip("open finding: a postgres Lock ending in an outage's first 15 s does not wrap ErrUnavailable")
	}
	url := serverURL(t)
	cut := &netCut{}
	l := newLockerWith(t, url, nil, cut)
	key := auditKey("audit41-outage-err")
	ctx := tctx(t, 60*time.Second)
	lockUnlock(t, ctx, l, key)
	cut.setDown(true)
	defer cut.setDown(false)
	wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err := l.Lock(wctx, key)
	t.Logf("Lock: %v (ErrHeld %v)", err, errors.Is(err, lock.ErrHeld))
	if !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, lock.ErrUnavailable) {
		t.Errorf("Lock whose context ends while the server is cut off: %v; want ErrNotAcquired, DeadlineExceeded and ErrUnavailable", err)
	}
}
