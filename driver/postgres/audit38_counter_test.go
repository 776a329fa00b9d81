package postgres

import (
	"context"
	"testing"
	"time"
)

// TestAudit38SweepKeepsCounterAhead: a key's counter ahead of the
// server's clock (a clock stepped back since its last grant) is not
// swept, however old its last grant, so the key's next token is above
// it; a counter behind by more than the keep is swept, and the next
// token (the clock) is still above it.
func TestAudit38SweepKeepsCounterAhead(t *testing.T) {
	const schema = "audit38counter"
	url := serverURL(t)
	raw := rawPool(t, url)
	ctx := tctx(t, 60*time.Second)
	raw.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
	t.Cleanup(func() { raw.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
	l := newLockerWith(t, url, &Options{Schema: schema}, &netCut{})
	for _, tc := range []struct {
		name  string
		shift string // added to the counter
		swept bool
	}{
		{"Ahead", "+ 600000000", false},
		{"Behind", "- 600000000", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := auditKey("audit38-counter-" + tc.name)
			ls, err := l.TryLock(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if err := ls.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			var counter int64
			if err := raw.QueryRow(ctx, "UPDATE "+schema+".keys SET counter = counter "+tc.shift+" WHERE key = $1 RETURNING counter", key).Scan(&counter); err != nil {
				t.Fatal(err)
			}
			// No entry, no tombstone: only the counter decides.
			if _, err := raw.Exec(ctx, "DELETE FROM "+schema+".entries WHERE key = $1", key); err != nil {
				t.Fatal(err)
			}
			if _, err := raw.Exec(ctx, "SELECT "+schema+".sweep3(1000, $1)", micros(sweepKeep)); err != nil {
				t.Fatal(err)
			}
			var rows int
			if err := raw.QueryRow(ctx, "SELECT count(*) FROM "+schema+".keys WHERE key = $1", key).Scan(&rows); err != nil {
				t.Fatal(err)
			}
			if swept := rows == 0; swept != tc.swept {
				t.Errorf("a counter 10 min %s of the clock: swept %v, want %v", tc.name, swept, tc.swept)
			}
			again, err := l.TryLock(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			defer again.Unlock(ctx)
			if int64(again.Token()) <= counter {
				t.Errorf("token after the sweep: %d, not above the counter %d", again.Token(), counter)
			}
		})
	}
}
