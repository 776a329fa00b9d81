package zookeeper

import (
	"maps"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver/drivertest"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
)

// testSessionTimeout is short, so that expiry tests take seconds; the test
// servers' tickTime (500ms) allows sessions from 1s.
const testSessionTimeout = 2 * time.Second

// skips are the subtests ZooKeeper cannot run (see Caps): grants live as
// long as their session, not a TTL; the fencing token is the lock node's
// czxid, which cannot be lost apart from the node; and the driver neither
// resumes leases nor keeps holds (Resume/TakesOver and Reentry/CountsHolds
// check that both are refused).
var skips = drivertest.Skips{
	"C2/OwnerCheckedAfterExpiry":  "grants live as long as the session",
	"C3/GrantCarriesExpiry":       "grants live as long as the session",
	"C5/FencingAfterCounterLoss":  "the token is the node's czxid: no counter to lose",
	"Resume/Gone":                 "no Resume",
	"Resume/AfterCrash":           "no Resume",
	"Resume/NeverShortens":        "no Resume",
	"Resume/RenewalNeverShortens": "no Resume",
	"Resume/LossKeepsResumed":     "no Resume",
	"Reentry/ShortHold":           "no holds",
	"Reentry/LostTogether":        "no holds",
	"Reentry/Resume":              "no holds",
	"Semaphore/Resume":            "no Resume",
	"Inspect/Expired":             "grants live as long as the session",
}

func TestConformance(t *testing.T) {
	servers := testserver.SharedZooKeeper(t).Addrs()
	drivertest.Run(t, func(t *testing.T) drivertest.Harness {
		h := newHarness(t, servers, testSessionTimeout)
		h.outage = outage
		return h
	}, skips)
}

// outage is a harness on a server of the subtest's own, which the suite
// stops and starts: the Lockers' sessions expire meanwhile.
func outage(t *testing.T) *drivertest.Outage {
	z := testserver.StartZooKeeper(t, nil)
	return &drivertest.Outage{Harness: newHarness(t, z.Addrs(), testSessionTimeout), Stop: z.Stop, Start: z.Restart}
}

// TestConformanceEnsemble runs the suite against a three-server ensemble,
// with every Locker's connection able to reach every server.
func TestConformanceEnsemble(t *testing.T) {
	servers := testserver.StartZooKeeperEnsemble(t, nil).Addrs()
	ensemble := drivertest.Skips{
		"Outage/LockWaits":    "one server covers it (TestConformance)",
		"Outage/TryLockFails": "one server covers it (TestConformance)",
	}
	maps.Copy(ensemble, skips)
	drivertest.Run(t, func(t *testing.T) drivertest.Harness {
		return newHarness(t, servers, testSessionTimeout)
	}, ensemble)
}
