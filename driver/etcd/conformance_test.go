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
	drivertest.Run(t, func(t *testing.T) drivertest.Harness {
		h := newHarness(t, e.Endpoints())
		h.outage = outage
		return h
	}, nil)
}

// outage is a harness on a member of the subtest's own, which the suite
// stops and starts.
func outage(t *testing.T) *drivertest.Outage {
	e := testserver.StartEtcd(t, nil)
	return &drivertest.Outage{Harness: newHarness(t, e.Endpoints()), Stop: e.Stop, Start: e.Restart}
}
