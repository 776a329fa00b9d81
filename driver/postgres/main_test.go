package postgres

import (
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
)

// TestMain starts the examples' server. The package's tests run one at a
// time, but for the three that take a minute each (a minute's wait for
// the sweep in TestAudit39KeysUsedOnceBounded and
// TestEnv38SweepBoundsKeysUsedOnce, a minute of one hot key in
// TestAudit39HotKeyDeadTuples): they call t.Parallel, so go test runs
// them together once every other test has ended (the conformance suite
// runs alone, as drivertest.Run requires), each on a database of its own.
// That saves two of the package's minutes.
func TestMain(m *testing.M) {
	// The examples' own schema, in the server's database.
	testserver.MainExamples(m, testserver.KindPostgres, "DLOCK_EXAMPLE_URL", func(u string) string {
		return u + sep(u) + "schema=dlock_example"
	})
}

func sep(u string) string {
	if strings.Contains(u, "?") {
		return "&"
	}
	return "?"
}
