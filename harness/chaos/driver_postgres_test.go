//go:build !chaos_skip_postgres

package chaos

import (
	"strings"
	"time"

	_ "github.com/dlock-go/dlock/driver/postgres"
)

func init() {
	// Every step is one call of a function of the driver's schema
	// (driver/postgres, schema.sql), as a statement pgx prepares once per
	// connection: the requests that run acquire, release and refresh are
	// the grants, releases and refreshes (a "prepare" request runs
	// nothing).
	register(&target{
		name: "postgres", backend: PostgresBackend, ttl: time.Second, open: openURL(PostgresURLFormat),
		grantReq:   pgCalls(".acquire("),
		releaseReq: pgCalls(".release("),
		refreshReq: pgCalls(".refresh("),
	})
}

// pgCalls matches the requests that run a statement calling fn.
func pgCalls(fn string) func(Request) bool {
	return func(r Request) bool {
		return (r.Cmd == "execute" || r.Cmd == "query") && strings.Contains(r.SQL, fn)
	}
}
