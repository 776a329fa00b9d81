package etcd

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
)

// TestAuditReenterLongerTTL (finding: a named owner's re-entry with a
// longer TTL than its grant's lease is refused as held). reenter first
// extends the grant's lease; when the lease is shorter than the new
// hold's TTL, lengthen moves the entry to a new lease with a Put, which
// changes the entry's mod revision; reenter's own Txn then compares the
// mod revision it read before, fails, and returns a HeldError: the
// owner's TryLock says ErrHeld while the owner holds the key, and the
// entry has been moved to the longer lease anyway.
func TestAuditReenterLongerTTL(t *testing.T) {
	e := testserver.SharedEtcd(t)
	prefix := fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())
	a := newTestLocker(t, e.Endpoints(), &Options{Prefix: prefix}, &netCut{})
	b := newTestLocker(t, e.Endpoints(), &Options{Prefix: prefix}, &netCut{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k := "audit-reenter"
	first, err := a.TryLock(ctx, k, lock.WithOwner("job-42"), lock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer first.Unlock(ctx)
	second, err := b.TryLock(ctx, k, lock.WithOwner("job-42"), lock.WithTTL(5*time.Second))
	if err != nil {
		t.Fatalf("the owner's re-entry with a longer TTL: %v (the owner holds the key)", err)
	}
	second.Unlock(ctx)
}
