package memcached

import (
	"testing"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
)

// TestMain gives the examples the shared server's URL
// (Example_exclusion).
func TestMain(m *testing.M) {
	testserver.MainExamples(m, testserver.KindMemcached, "DLOCK_EXAMPLE_URL", func(addr string) string { return "memcached://" + addr })
}
