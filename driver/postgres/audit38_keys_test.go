package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/lock"
)

// TestAudit38BadKeys: the keys a step's literal could not carry (bytes
// that are not UTF-8, keys longer than the index allows) never reach the
// query text: lock refuses them before any I/O, for a Lock with no
// deadline too (nothing to ride out). A call that gets past lock (the
// driver called directly) with bytes that are not UTF-8 and a quote is
// refused by the server as a whole query, and changes nothing.
func TestAudit38BadKeys(t *testing.T) {
	url := serverURL(t)
	raw := rawPool(t, url)
	ctx := tctx(t, 60*time.Second)
	l := newTestLocker(t, url, nil, &netCut{})
	lockUnlock(t, ctx, l, auditKey("audit38-badkeys-before"))
	for _, key := range []string{
		"audit38-\xff\xfe'\\",
		"audit38-\xc3'); DELETE FROM dlock.entries; --",
		"audit38-" + strings.Repeat("\\'", lock.MaxKeyLen),
	} {
		for _, try := range []string{"TryLock", "Lock"} {
			start := time.Now()
			var err error
			if try == "TryLock" {
				_, err = l.TryLock(ctx, key)
			} else {
				_, err = l.Lock(ctx, key)
			}
			if !errors.Is(err, lock.ErrInvalid) {
				t.Errorf("%s of key %.40q: %.200v; want ErrInvalid", try, key, err)
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("%s of key %.40q took %v", try, key, took)
			}
		}
	}

	victim := auditKey("audit38-badkeys-victim")
	held, err := l.TryLock(ctx, victim)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock(ctx)
	pool := rawPool(t, url)
	d, _ := newDriver(pool, nil, false)
	defer d.Close()
	dl := &driver.Lease{Key: "audit38-\xc3'); DELETE FROM dlock.entries; --", Owner: strings.Repeat("a", 32), TTL: 10 * time.Second}
	err = d.Acquire(context.Background(), dl)
	if err == nil || !strings.Contains(err.Error(), "invalid byte sequence") {
		t.Errorf("the driver's Acquire of a key that is not UTF-8, with a quote: %v; want the server's refusal", err)
	}
	var n int
	if err := raw.QueryRow(ctx, "SELECT count(*) FROM dlock.keys WHERE key = $1 AND token = $2 AND holder IS NOT NULL", victim, int64(held.Token())).Scan(&n); err != nil || n != 1 {
		t.Errorf("the held key's grant after the refused step: %d rows, %v; want 1", n, err)
	}
}
