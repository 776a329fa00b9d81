package etcd

import (
	"context"
	"testing"

	"github.com/dlock-go/dlock/internal/testsupport/settest"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
)

// Overlapping sets with single-key lockers mixed in (settest.Stress),
// some of the sets taken in one step (AcquireSet's Txn).
func TestAudit42SetStress(t *testing.T) {
	url := "etcd://" + testserver.StartEtcd(t, nil).Addr() + "/audit42"
	n := settest.Stress(t, func() *lock.Locker {
		l, err := lock.Open(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		return l
	})
	t.Logf("sets taken in one step: %d", n)
	if n == 0 {
		t.Error("no set was taken in one step: the stress did not reach AcquireSet's grants")
	}
}
