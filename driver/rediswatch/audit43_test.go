package rediswatch

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/redis/go-redis/v9"
)

// TestAudit43SetNoRetryWithoutWatch: the set's SETs carry no NX, so only
// its WATCH keeps them off a key another client took between the reads
// and the EXEC. Here a competitor takes the set's second key at that
// moment, and the connection fails before the transaction's reply (the
// MULTI...EXEC held until go-redis's read timeout, or the connection
// killed by the server): go-redis must not send the transaction again on
// a fresh connection (which would have no WATCH). The competitor keeps
// its key, the set is not granted, and its first key is not written.
func TestAudit43SetNoRetryWithoutWatch(t *testing.T) {
	admin := standalone(t)
	for _, tc := range []string{"ReplyTimeout", "Killed"} {
		t.Run(tc, func(t *testing.T) {
			ctx := testCtx(t)
			proxy := startAuditProxy(t, admin.Options().Addr)
			rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ReadTimeout: 300 * time.Millisecond, MaxRetries: 5, MinRetryBackoff: time.Millisecond})
			t.Cleanup(func() { rdb.Close() })
			_, d := newTestLocker(t, rdb, nil)
			ks := setKeys(t, 2)
			ls := setLeases(ks)
			hook := func(op, lk string) {
				if err := admin.Set(ctx, d.LockKey(ks[1]), "intruder", 10*time.Second).Err(); err != nil {
					t.Error(err)
				}
				if tc == "ReplyTimeout" {
					multi := []byte("multi")
					proxy.HoldMatch.Store(&multi)
				} else {
					admin.ClientKillByFilter(ctx, "TYPE", "normal", "SKIPME", "yes")
				}
			}
			d.beforeExec.Store(&hook)
			since := time.Now()
			err := d.AcquireSet(ctx, ls)
			d.beforeExec.Store(nil)
			if err == nil {
				t.Fatal("the set was granted over a key taken after its reads")
			}
			if errors.Is(err, driver.ErrHeld) {
				t.Log("refused as held (a retry under a new WATCH)")
			}
			time.Sleep(200 * time.Millisecond)
			if v := admin.Get(ctx, d.LockKey(ks[1])).Val(); v != "intruder" {
				t.Errorf("the competitor's key holds %q after the set's failed transaction, want intruder", v)
			}
			if v, err := admin.Get(ctx, d.LockKey(ks[0])).Result(); err != redis.Nil {
				t.Errorf("the set's first key holds %q (%v) after its failed transaction", v, err)
			}
			if n := proxy.Count([]byte("multi"), since); tc == "ReplyTimeout" && n != 1 {
				t.Errorf("the transaction was sent %d times, want once", n)
			}
			admin.Del(ctx, d.LockKey(ks[1]))
		})
	}
}

// TestAudit43SetDuplicateKey: a set that names a key twice (lock never
// passes one; another caller of the driver might) is refused as invalid
// before any I/O. The transaction would have set the key to the second
// lease's owner and reported both leases granted, with one token.
func TestAudit43SetDuplicateKey(t *testing.T) {
	admin := standalone(t)
	_, d := newTestLocker(t, admin, nil)
	ctx := testCtx(t)
	ks := setKeys(t, 2)
	ls := setLeases([]string{ks[0], ks[1], ks[0]})
	err := d.AcquireSet(ctx, ls)
	if !errors.Is(err, driver.ErrInvalid) {
		t.Errorf("AcquireSet naming %q twice: %v, want ErrInvalid", ks[0], err)
	}
	assertSetAbsent(t, admin, d, ks, "after a set naming a key twice")
}
