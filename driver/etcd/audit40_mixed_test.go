package etcd

import (
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/queuetest"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
)

// TestAudit40Mixed runs writers, readers and permits of 2 on one key
// through three clients at once: no two holders the rule excludes, no
// waiter left waiting for its watches (a call over 15 s).
func TestAudit40Mixed(t *testing.T) {
	e := testserver.SharedEtcd(t)
	prefix := fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())
	var lockers []*lock.Locker
	for range 3 {
		d, lo := newDriver(&Options{Prefix: prefix})
		d.c, d.owned = rawClient(t, e.Endpoints()), false
		l := lock.New(d, lo)
		t.Cleanup(func() { l.Close() })
		lockers = append(lockers, l)
	}
	queuetest.Mixed(t, lockers, "audit40/mixed", 12, 2, 8*time.Second, 15*time.Second)
}
