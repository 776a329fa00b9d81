package zookeeper

import (
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/conformance"
	"github.com/dlock-go/dlock/internal/testserver"
)

// testSessionTimeout is short, so that expiry tests take seconds; the test
// servers' tickTime (500ms) allows sessions from 1s.
const testSessionTimeout = 2 * time.Second

func TestConformance(t *testing.T) {
	servers := testserver.SharedZooKeeper(t).Addrs()
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		return newHarness(t, servers, testSessionTimeout)
	})
}

// TestConformanceEnsemble runs the suite against a three-server ensemble,
// with every Locker's connection able to reach every server.
func TestConformanceEnsemble(t *testing.T) {
	servers := testserver.StartZooKeeperEnsemble(t, nil).Addrs()
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		return newHarness(t, servers, testSessionTimeout)
	})
}
