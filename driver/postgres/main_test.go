package postgres

import (
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
)

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
