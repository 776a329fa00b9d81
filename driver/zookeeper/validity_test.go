package zookeeper

import (
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// TestValidityWithinMonitor: the validity of a call that began some time
// after the session's last proof gives a lease deadline (lock's: the
// call's start plus the validity, less its drift margin) no later than
// the moment the monitor ends the session's leases (the proof plus the
// timeout, less the timeout's drift margin).
func TestValidityWithinMonitor(t *testing.T) {
	proof := time.Now()
	for _, timeout := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 10 * time.Second, 40*time.Second + 7} {
		monitor := proof.Add(timeout - driver.DriftMargin(timeout))
		for age := time.Duration(0); age < timeout; age += timeout/97 + 13 {
			v := validityAfterProof(timeout, age)
			if v > timeout {
				t.Fatalf("timeout %v, proof %v old: validity %v", timeout, age, v)
			}
			begin := proof.Add(age)
			if lock := begin.Add(v - driver.DriftMargin(v)); lock.After(monitor) {
				t.Fatalf("timeout %v, proof %v old: validity %v gives a deadline %v after the monitor's", timeout, age, v, lock.Sub(monitor))
			}
		}
	}
}
