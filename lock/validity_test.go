package lock_test

import (
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// A lease reports the validity its backend applied, not the TTL asked
// for: after the grant, and after each Refresh (whose TTL it reports too),
// and its Deadline is counted with it from the moment the call was sent.
func TestValidityReported(t *testing.T) {
	f := newFake()
	f.setFaults(func(x *faults) { x.validityLoss = 2 * time.Second }) // memcached's N-2
	l := lock.New(f, nil)
	defer l.Close()
	check := func(what string, lease *lock.Lease, before, after time.Time, ttl, want time.Duration) {
		t.Helper()
		if got := lease.TTL(); got != ttl {
			t.Errorf("%s: TTL() = %v, want the %v asked for", what, got, ttl)
		}
		if got := lease.Validity(); got != want {
			t.Errorf("%s: Validity() = %v, want the %v applied", what, got, want)
		}
		margin := want/100 + 2*time.Millisecond
		if dl := lease.Deadline(); dl.Before(before.Add(want-margin)) || dl.After(after.Add(want-margin)) {
			t.Errorf("%s: Deadline %v after the call began, want within [%v, %v]", what, dl.Sub(before), want-margin, after.Sub(before)+want-margin)
		}
	}
	before := time.Now()
	lease, err := l.Lock(bg(t), "k", lock.WithTTL(3*time.Second), lock.WithDisableAutoRenew(true))
	after := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Unlock(bg(t))
	check("grant", lease, before, after, 3*time.Second, time.Second)

	before = time.Now()
	if err := lease.Refresh(bg(t), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	check("refresh", lease, before, time.Now(), 5*time.Second, 3*time.Second)
}
