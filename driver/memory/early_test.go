package memory_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver/drivertest"
	"github.com/dlock-go/dlock/driver/memory"
	"github.com/dlock-go/dlock/lock"
)

// earlyPurge is how much sooner than the validity it reports the early
// variant's Store ends a grant: three times the drift margin of the
// Validity subtests' 3 s TTL.
const earlyPurge = 100 * time.Millisecond

// earlyHarness is the hookup of a Store that ends grants earlyPurge before
// the validity its driver reports.
type earlyHarness struct{ *harness }

func (h earlyHarness) NewLocker(t *testing.T, o *lock.Options) *lock.Locker {
	l := memory.NewEarly(h.s, o, earlyPurge)
	t.Cleanup(func() { l.Close() })
	return l
}

// TestAudit38EarlyPurgeFailsValidity: the suite's Validity subtests fail a
// backend that ends grants 100 ms before the validity its driver reports
// (they run in a child process, whose failure is the expected outcome).
func TestAudit38EarlyPurgeFailsValidity(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the Validity subtests (about 10 s)")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestAudit38EarlyPurgeChild$/^Validity/", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "DLOCK_EARLY_PURGE_CHILD=1")
	out, err := cmd.CombinedOutput()
	t.Logf("child:\n%s", out)
	if err == nil {
		t.Fatalf("the Validity subtests passed a Store that ends grants %v early", earlyPurge)
	}
	for _, sub := range []string{"Validity/WithoutRenewal", "Validity/AfterRefresh"} {
		if !strings.Contains(string(out), "--- FAIL: TestAudit38EarlyPurgeChild/"+sub) {
			t.Errorf("%s did not fail on a Store that ends grants %v early", sub, earlyPurge)
		}
	}
	if !strings.Contains(string(out), "before the lease's Deadline") {
		t.Errorf("no failure says another Locker was granted the key before the lease's Deadline")
	}
}

// TestAudit38EarlyPurgeChild is the suite on the early Store, run by
// TestAudit38EarlyPurgeFailsValidity in a child process: on its own it
// skips.
func TestAudit38EarlyPurgeChild(t *testing.T) {
	if os.Getenv("DLOCK_EARLY_PURGE_CHILD") != "1" {
		t.Skip("run by TestAudit38EarlyPurgeFailsValidity")
	}
	drivertest.Run(t, func(t *testing.T) drivertest.Harness {
		return earlyHarness{&harness{s: memory.NewStore()}}
	}, skips)
}
