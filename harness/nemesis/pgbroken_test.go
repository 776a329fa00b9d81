package nemesis

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/dlock-go/dlock/driver/postgres"
	"github.com/dlock-go/dlock/harness/chaos"
	"github.com/jackc/pgx/v5"
)

// Negative controls on PostgreSQL, for TestTeeth: the postgres driver
// itself over a copy of its schema (schema.sql, under another schema
// name, made before the run: create_schema=false) with one function
// broken. The checker must find overlaps in a short run under faults.
//
//   - release-any: a release deletes the key's grants with its owner's
//     entry (the unconditional DEL of the Redis seeds): a reader's release
//     ends the other readers' grants, a waiter that gives up (Leave) the
//     holder's, a holder whose lease ended (a release's reply lost and
//     sent again, a frozen child) the next holder's, and the key is
//     granted again while they hold.
//   - release-row-any: release3 clears the grant in the key's row
//     whoever holds it (a waiter's Leave, the release of a lease that
//     ended, sent again after a lost reply): the key is granted again
//     while its holder holds it. Unlock's fast path (unlock3) still
//     compares the owner, so only release3 is broken.
//   - hand-held: hand3 hands the key to the first waiter without
//     checking the row's grant: a waiter that gives up (Leave, its
//     entry deleted by release3) while another holds the key hands it to
//     the next waiter, and two hold at once.
//   - reenter-any: a named owner's re-entry joins the grant of any named
//     owner of the key, not only its own: two workers hold at once.
var pgBroken = []struct {
	name, schema, breaks string
	// old is the text of schema.sql (its schema name put in) the bug
	// replaces with new.
	old, new string
}{
	{
		name: "postgres-release-any", schema: "dlock_release_any",
		breaks: "a release deletes every grant of the key, its owner's or not",
		old:    "DELETE FROM dlock_release_any.entries e WHERE e.key = k AND e.owner = o;",
		new:    "DELETE FROM dlock_release_any.entries e WHERE e.key = k AND (e.owner = o OR e.granted); -- the bug",
	},
	{
		name: "postgres-release-row-any", schema: "dlock_release_row_any",
		breaks: "release3 clears the grant in the key's row, its owner's or not",
		old:    "UPDATE dlock_release_row_any.keys x SET holder = NULL, since = NULL, expires = NULL, pending = NULL, note = NULL WHERE x.key = k AND x.holder = o;",
		new:    "UPDATE dlock_release_row_any.keys x SET holder = NULL, since = NULL, expires = NULL, pending = NULL, note = NULL WHERE x.key = k AND x.holder IS NOT NULL; -- the bug",
	},
	{
		name: "postgres-hand-held", schema: "dlock_hand_held",
		breaks: "a release hands the key to its first waiter while the key's row holds another's grant",
		old:    "IF EXISTS (SELECT 1 FROM dlock_hand_held.keys x WHERE x.key = k AND x.holder IS NOT NULL) THEN -- row_held, inlined\n        RETURN false;",
		new:    "IF false THEN -- the bug: the row's grant not checked\n        RETURN false;",
	},
	{
		name: "postgres-reenter-any", schema: "dlock_reenter_any",
		breaks: "a named owner's re-entry joins any named owner's grant of the key",
		old:    "AND left(e.owner, 16) = left(o, 16)",
		new:    "AND true -- the bug: no owner compared",
	},
}

func init() {
	for _, b := range pgBroken {
		pg := TargetByName("postgres")
		t := *pg
		t.Name, t.Broken, t.Notify = "ctl-"+b.name, b.breaks, false
		t.url = pgURL("schema=" + b.schema + "&create_schema=false")
		t.prepare = func(srv *chaos.Server) error { return installBroken(srv, b.schema, b.old, b.new) }
		targets = append(targets, &t)
	}
}

// installBroken creates the driver's schema under the name schema, as
// the application's role, with old replaced by new (exactly once: a
// schema.sql that changed must fail the run, not run it unbroken).
func installBroken(srv *chaos.Server, schema, old, new string) error {
	script, err := postgres.SchemaSQL(schema)
	if err != nil {
		return err
	}
	if n := strings.Count(script, old); n != 1 {
		return fmt.Errorf("schema.sql holds %q %d times, want once: update the broken variant", old, n)
	}
	script = strings.Replace(script, old, new, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, chaos.PostgresURL(srv.Addrs[0], ""))
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	_, err = c.Exec(ctx, script)
	return err
}
