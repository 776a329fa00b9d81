package zookeeper

import (
	"context"
	"testing"

	"github.com/dlock-go/dlock/internal/testsupport/settest"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
)

// Overlapping sets with single-key lockers mixed in (settest.Stress).
func TestAudit42SetStress(t *testing.T) {
	url := "zookeeper://" + testserver.StartZooKeeper(t, nil).Addr() + "/audit42"
	settest.Stress(t, func() *lock.Locker {
		l, err := lock.Open(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		return l
	})
}
