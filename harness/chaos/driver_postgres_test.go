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
	// connection: the requests that run acquire (lock3), release (unlock3) and refresh are
	// the grants, releases and refreshes (a "prepare" request runs
	// nothing). Since version 9 an uncontended Lock and Unlock are first
	// plain UPDATEs of the key's row (plainSteps in driver/postgres):
	// the one that sets the counter grants, the one that clears the
	// holder releases.
	register(&target{
		name: "postgres", backend: PostgresBackend, ttl: time.Second, open: openURL(PostgresURLFormat),
		grantReq:   pgCalls(".acquire(", ".acquire3(", ".lock3(", ".keys x SET counter = "),
		releaseReq: pgCalls(".release(", ".release3(", ".unlock3(", ".keys x SET holder = NULL"),
		refreshReq: pgCalls(".refresh(", ".refresh3("),
	})
}

// pgCalls matches the requests that run a statement calling one of fns
// (schema version 2's names, and version 3's and later: acquire3, the
// fast path lock3, ...).
func pgCalls(fns ...string) func(Request) bool {
	return func(r Request) bool {
		if r.Cmd != "execute" && r.Cmd != "query" {
			return false
		}
		for _, fn := range fns {
			if strings.Contains(r.SQL, fn) {
				return true
			}
		}
		return false
	}
}
