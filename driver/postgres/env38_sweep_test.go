package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/canary"
	"github.com/dlock-go/dlock/lock"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestEnv38SweepBoundsKeysUsedOnce: 2,000 keys used once with short
// TTLs (released, left to expire, or abandoned by waiters whose context
// ended, which leaves tombstones) leave a bounded number of rows once
// the sweep's age (a minute) has passed and Lockers keep working: keys,
// entries and voids kept a row for each of them forever.
func TestEnv38SweepBoundsKeysUsedOnce(t *testing.T) {
	t.Parallel() // see TestMain: its minute beside the others'
	url := envDB(t, "env38_sweep")
	raw := rawPool(t, url)
	ctx := tctx(t, 5*time.Minute)
	prefix := auditKey("env38-sweep")
	const workers, perWorker = 4, 500
	var wg sync.WaitGroup
	for i := range workers {
		l := newTestLocker(t, url, &lock.Options{DisableAutoRenew: true}, &netCut{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range perWorker {
				if err := useOnceOrStarved(t, ctx, l, fmt.Sprintf("%s/%d/%d", prefix, i, j), j%10); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	made := time.Now()
	before := rowCounts(t, raw)
	t.Logf("rows after using %d keys once: %v", workers*perWorker, before)
	if before[0] < workers*perWorker {
		t.Fatalf("%d keys rows after using %d keys; the check needs them", before[0], workers*perWorker)
	}
	time.Sleep(time.Until(made.Add(sweepKeep + 2*time.Second)))
	// A Locker at work sweeps (a few hundred keys per sweep).
	l := newTestLocker(t, url, nil, &netCut{})
	var after [3]int
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		for range 25 {
			lockUnlock(t, ctx, l, "env38-sweep-work")
		}
		after = rowCounts(t, raw)
		if after[0] <= 1 && after[1] == 0 && after[2] == 0 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("rows %v after the sweeps (%v after the keys were used)", after, time.Since(made))
	if after[0] > 10 || after[1] > 10 || after[2] > 10 {
		t.Fatalf("rows left (keys, entries, voids): %v, from %v after using %d keys once, %v before; want at most 10 each",
			after, before, workers*perWorker, time.Since(made))
	}
}

// useOnceOrStarved is useOnce, judged on a loaded machine: the kinds
// that hold a key for 300 ms fail when the machine stalls for most of it
// (a grant whose reply comes after its validity, a held key that expires
// before a waiter's 50 ms context ends). A meter tells such a stall from
// a failure of the library's, and the key is used again under a new name.
func useOnceOrStarved(t *testing.T, ctx context.Context, l *lock.Locker, key string, kind int) error {
	for try := 1; ; try++ {
		m := canary.StartMeter()
		err := useOnce(ctx, l, key, kind)
		worst := m.End()
		if err == nil || kind < 6 || try == 3 || !canary.Stalled(t, worst, 250*time.Millisecond, err.Error()) {
			return err
		}
		key += "+"
	}
}

// useOnce uses key once: kind 0-5 takes and releases it, 6-7 takes it
// for 300 ms and leaves it to expire, 8-9 waits for it while another
// holds it and gives up (its Leave leaves a tombstone).
func useOnce(ctx context.Context, l *lock.Locker, key string, kind int) error {
	switch {
	case kind < 6:
		ls, err := l.TryLock(ctx, key)
		if err != nil {
			return err
		}
		return ls.Unlock(ctx)
	case kind < 8:
		_, err := l.TryLock(ctx, key, lock.WithTTL(300*time.Millisecond))
		return err
	}
	if _, err := l.TryLock(ctx, key, lock.WithTTL(300*time.Millisecond)); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if ls, err := l.Lock(wctx, key); !errors.Is(err, context.DeadlineExceeded) {
		if err == nil {
			ls.Unlock(ctx)
		}
		return fmt.Errorf("a waiter of a held key: %v, want its context's end", err)
	}
	return nil
}

// rowCounts is how many rows keys, entries and voids have.
func rowCounts(t testing.TB, raw *pgxpool.Pool) [3]int {
	t.Helper()
	var n [3]int
	err := raw.QueryRow(context.Background(), "SELECT (SELECT count(*) FROM dlock.keys), (SELECT count(*) FROM dlock.entries), (SELECT count(*) FROM dlock.voids)").
		Scan(&n[0], &n[1], &n[2])
	if err != nil {
		t.Fatal(err)
	}
	return n
}
