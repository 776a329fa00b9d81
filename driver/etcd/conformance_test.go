package etcd

import (
	"testing"

	"github.com/dlock-go/dlock/driver/drivertest"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
)

// TestConformance runs the driver conformance suite against one etcd
// member. The driver does every check: no subtest may skip.
func TestConformance(t *testing.T) {
	e := testserver.SharedEtcd(t)
	drivertest.Run(t, func(t *testing.T) drivertest.Harness { return newHarness(t, e.Endpoints()) }, nil)
}
