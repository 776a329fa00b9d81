package rediswatch

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/redis/go-redis/v9"
)

// After an Acquire with an unknown outcome, the clean-up Release removes a
// grant that was applied, and aborts one still on its way: here the grant's
// EXEC reaches the server only after the clean-up ran.
func TestCleanupAfterLostGrantReply(t *testing.T) {
	for _, mode := range []driver.Mode{driver.Exclusive, driver.Shared, driver.Permit} {
		t.Run(mode.String(), func(t *testing.T) { testCleanupAfterLostGrantReply(t, mode) })
	}
}

func testCleanupAfterLostGrantReply(t *testing.T, mode driver.Mode) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := testCtx(t)
		d := testDriver(rdb, DefaultPrefix)
		defer d.Close()
		newLease := func() *driver.Lease {
			l := &driver.Lease{Key: testKey(t), Owner: owner(), Mode: mode, TTL: 10 * time.Second}
			if mode == driver.Permit {
				l.Limit = 2
			}
			return l
		}

		// The EXEC arrives late: the clean-up sets the tombstone first and
		// finds no grant; the EXEC is aborted.
		l := newLease()
		cleanUpBeforeExec(t, ctx, d, l)
		lk := d.LockKey(l.Key)
		if n := rdb.Exists(ctx, lk, readersKey(lk), permitsKey(lk)).Val(); n != 0 {
			t.Errorf("the late EXEC granted the key after the clean-up")
		}
		if pttl := rdb.PTTL(ctx, tombstone(lk, l.Owner)).Val(); pttl <= 0 || pttl > 10*time.Second {
			t.Errorf("tombstone PTTL %v, want within the lease's TTL", pttl)
		}

		// The EXEC was applied but its reply lost: the clean-up deletes the
		// grant.
		l = newLease()
		cleanUpAfterExec(t, ctx, d, l)
		if lk := d.LockKey(l.Key); rdb.Exists(ctx, lk, readersKey(lk), permitsKey(lk)).Val() != 0 {
			t.Errorf("the clean-up left the grant")
		}
	})
}

// cleanUpBeforeExec makes l's Acquire lose its reply with its clean-up
// Release (as lock sends it: Token unset, Data as Acquire left it) run
// before the grant's EXEC reaches the server: the clean-up finds no grant,
// and the EXEC is aborted. It runs once, before the first EXEC: a shared
// grant or a permit's, which tries again after an abort, must not grant on
// its retry.
func cleanUpBeforeExec(t *testing.T, ctx context.Context, d *watchDriver, l *driver.Lease) {
	t.Helper()
	var once sync.Once
	late := func(op, lk string) {
		once.Do(func() {
			cleanup := *l
			if err := d.Release(ctx, &cleanup); !errors.Is(err, driver.ErrNotHeld) {
				t.Errorf("clean-up before the EXEC: err = %v, want ErrNotHeld", err)
			}
		})
	}
	d.beforeExec.Store(&late)
	defer d.beforeExec.Store(nil)
	if err := d.Acquire(ctx, l); !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("Acquire whose EXEC came after the clean-up: err = %v, want an aborted (held) attempt", err)
	}
}

// cleanUpAfterExec acquires l, then runs the clean-up Release of a grant
// whose reply was lost (Token unset): it deletes the grant.
func cleanUpAfterExec(t *testing.T, ctx context.Context, d *watchDriver, l *driver.Lease) {
	t.Helper()
	if err := d.Acquire(ctx, l); err != nil {
		t.Fatal(err)
	}
	cleanup := *l
	cleanup.Token = 0
	if err := d.Release(ctx, &cleanup); err != nil {
		t.Fatalf("clean-up of an applied grant: %v", err)
	}
}

// An Acquire that failed before sending its transaction cannot have
// granted anything: its clean-up needs no round trip.
func TestCleanupWithoutExecNeedsNoIO(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	rdb.Close()
	d := testDriver(rdb, DefaultPrefix)
	defer d.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	l := &driver.Lease{Key: "k", Owner: owner(), TTL: time.Second}
	if err := d.Acquire(ctx, l); err == nil || errors.Is(err, driver.ErrHeld) {
		t.Fatalf("Acquire on a closed client: err = %v", err)
	}
	if err := d.Release(context.Background(), l); !errors.Is(err, driver.ErrNotHeld) {
		t.Errorf("clean-up of an attempt that sent nothing: err = %v, want ErrNotHeld without I/O", err)
	}
}
