package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// TestEnv38KeysAsLiterals: a step's arguments are sent as SQL literals
// in its query; keys with quotes, backslashes, placeholders and SQL of
// their own are stored as they are and lock as any key, whatever
// standard_conforming_strings says.
func TestEnv38KeysAsLiterals(t *testing.T) {
	url := envDB(t, "env38_literals", "standard_conforming_strings=off")
	raw := rawPool(t, url)
	ctx := tctx(t, 60*time.Second)
	for _, u := range []string{serverURL(t), url} {
		l := newTestLocker(t, u, nil, &netCut{})
		r := rawPool(t, u)
		for _, key := range []string{`a'b`, `a\b`, `a\'b`, `\`, `'`, `$1 $2`, `x'); DELETE FROM dlock.keys; --`, "é\t\n✓", `E'\x41'`} {
			ls, err := l.TryLock(ctx, key, lock.WithTTL(10*time.Second))
			if err != nil {
				t.Fatalf("TryLock(%q): %v", key, err)
			}
			var n int
			if err := r.QueryRow(ctx, "SELECT count(*) FROM dlock.keys WHERE key = $1 AND token = $2 AND holder IS NOT NULL", key, int64(ls.Token())).Scan(&n); err != nil || n != 1 {
				t.Errorf("key %q: %d grants stored under it, %v; want 1", key, n, err)
			}
			if _, err := l.TryLock(ctx, key); err == nil {
				t.Errorf("key %q granted twice", key)
			}
			if err := ls.Refresh(ctx, 10*time.Second); err != nil {
				t.Errorf("Refresh of %q: %v", key, err)
			}
			if err := ls.Unlock(ctx); err != nil {
				t.Errorf("Unlock of %q: %v", key, err)
			}
		}
	}
	var n int
	if err := raw.QueryRow(context.Background(), "SELECT count(*) FROM dlock.keys").Scan(&n); err != nil || n == 0 {
		t.Fatalf("keys rows: %d, %v", n, err)
	}
}
