package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

func auditKey(prefix string) string {
	b := make([]byte, 6)
	rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

// entriesOf lists the key's grant in its row (first) and its entries as
// "owner granted" lines.
func entriesOf(t testing.TB, raw *pgxpool.Pool, schema, key string) []string {
	t.Helper()
	rows, err := raw.Query(context.Background(),
		"SELECT format('%s granted=true token=%s expires_in=%s (row)', holder, token, expires - clock_timestamp()) FROM "+schema+".keys WHERE key = $1 AND holder IS NOT NULL"+
			" UNION ALL (SELECT format('%s granted=%s token=%s expires_in=%s', owner, granted, token, expires - clock_timestamp()) FROM "+schema+".entries WHERE key = $1 ORDER BY seq)", key)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func waitFor(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	end := time.Now().Add(d)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestAuditLateCheckAfterLeave: a queued waiter's check_turn is on the
// network when the waiter's Lock gives up; Leave then finds the waiter's
// entry and deletes it, leaving no tombstone, so the late check_turn
// finds no entry, joins again, and, the key being free, is granted: a
// grant of the whole TTL that nobody holds or releases.
func TestAuditLateCheckAfterLeave(t *testing.T) {
	// b's heartbeat step may reach the server just after a's release,
	// before the hold, and grant b: the race is then not exercised, and
	// the scenario runs again on a new key.
	for try := 1; try <= 5; try++ {
		if lateCheckAfterLeave(t, try) {
			return
		}
		t.Logf("try %d: b was granted by a step sent before the hold; again", try)
	}
	t.Fatal("b was granted before the hold in 5 tries: the late check_turn was never exercised")
}

// lateCheckAfterLeave runs the scenario once and reports whether b's
// check_turn was held as it should be (false: b was granted first).
func lateCheckAfterLeave(t *testing.T, try int) bool {
	url := serverURL(t)
	raw := rawPool(t, url)
	ctx := context.Background()
	a := newTestLocker(t, url, nil, &netCut{})
	px := newPGProxy(t, serverAddr(t, url))
	b := proxiedLocker(t, url, px, 1, nil)
	key := auditKey(fmt.Sprintf("audit-latecheck-%d", try))

	la, err := a.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	bctx, bcancel := context.WithCancel(ctx)
	defer bcancel()
	berr := make(chan error, 1)
	go func() {
		l, err := b.Lock(bctx, key, lock.WithTTL(30*time.Second))
		if err == nil {
			uctx, cancel := context.WithTimeout(ctx, 5*time.Second) // through the proxy, maybe held
			l.Unlock(uctx)
			cancel()
			err = errors.New("granted")
		}
		berr <- err
	}()
	waitFor(t, "b's queue entry", 5*time.Second, func() bool { return len(entriesOf(t, raw, "dlock", key)) == 2 })

	// b's next step, woken by a's release, stays on the network.
	px.holdAll()
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b's check_turn on the network", 3*time.Second, func() bool { return px.heldBytes() > 0 })
	bcancel()
	if err := <-berr; err != nil && err.Error() == "granted" {
		px.deliver()
		return false
	} else if !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("b's Lock: %v, want ErrNotAcquired", err)
	}
	// Leave takes b's entry out (on a new connection).
	waitFor(t, "b's Leave", 5*time.Second, func() bool { return len(entriesOf(t, raw, "dlock", key)) == 0 })

	// The check_turn reaches the server now.
	px.deliver()
	time.Sleep(500 * time.Millisecond)

	if got := entriesOf(t, raw, "dlock", key); len(got) != 0 {
		t.Errorf("after the waiter gave up and left, the key has entries nobody will release: %q", got)
	}
	lc, err := a.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("the key is free (its holder unlocked, its waiter gave up), yet TryLock: %v", err)
	}
	lc.Unlock(ctx)
	return true
}

// TestAuditReentrantHoldsRenewedTogether: two holds of one named owner
// on one key are one entries row. refresh() updates it FROM unnest(ks,
// os) with both holds matching; PostgreSQL updates the row once and
// RETURNING gives one of the two owners, so the other hold is reported
// ErrNotHeld by RefreshBatch and its lease is lost while the grant lives.
func TestAuditReentrantHoldsRenewedTogether(t *testing.T) {
	url := serverURL(t)
	ctx := context.Background()
	a := newTestLocker(t, url, &lock.Options{TTL: 3 * time.Second}, &netCut{})
	key := auditKey("audit-holds")
	var holds []*lock.Lease
	for range 4 {
		h, err := a.TryLock(ctx, key, lock.WithOwner("job-7"))
		if err != nil {
			t.Fatal(err)
		}
		holds = append(holds, h)
	}
	time.Sleep(3 * time.Second) // the renewals at 1 s and 2 s, due together (within validity/30)
	for i, h := range holds {
		select {
		case <-h.Done():
			t.Errorf("hold %d lost while the named owner's grant is renewed: %v", i+1, h.Err())
		default:
		}
		h.Unlock(ctx)
	}
}

// TestAuditCounterDeletedUnderLoad: an operator deletes the key's row of
// keys while it holds no grant (the counter loss the schema is made to
// survive) while clients
// take and release the key. begin_key's INSERT ... ON CONFLICT DO NOTHING
// then SELECT ... FOR UPDATE locks nothing when the row is deleted
// between the two, and the step runs beside a step that made the row
// again: both count no grant, both grant (and a step whose next_token
// finds no row fails on the NULL token).
func TestAuditCounterDeletedUnderLoad(t *testing.T) {
	url := serverURL(t)
	raw := rawPool(t, url)
	ctx := context.Background()
	key := auditKey("audit-counterloss")
	const workers = 6
	var lockers []*lock.Locker
	for range workers {
		lockers = append(lockers, newTestLocker(t, url, &lock.Options{TTL: 10 * time.Second, DisableAutoRenew: true}, &netCut{}))
	}
	stop := make(chan struct{})
	var (
		mu               sync.Mutex
		holders, maxSeen int
		grants, failures int
		firstErr         error
	)
	var wg sync.WaitGroup
	for _, l := range lockers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				le, err := l.TryLock(ctx, key)
				if err != nil {
					if !errors.Is(err, lock.ErrHeld) {
						mu.Lock()
						failures++
						if firstErr == nil {
							firstErr = err
						}
						mu.Unlock()
					}
					continue
				}
				mu.Lock()
				holders++
				grants++
				maxSeen = max(maxSeen, holders)
				mu.Unlock()
				time.Sleep(time.Millisecond)
				mu.Lock()
				holders-- // before the Unlock is sent
				mu.Unlock()
				le.Unlock(ctx)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			// Version 3 keeps the exclusive grant in the row: a row that
			// holds one is not a counter alone, and deleting it ends
			// the grant (as deleting its entry does).
			raw.Exec(ctx, "DELETE FROM dlock.keys WHERE key = $1 AND holder IS NULL", key)
		}
	}()
	time.Sleep(8 * time.Second)
	close(stop)
	wg.Wait()
	t.Logf("%d grants, %d failed attempts (first: %v)", grants, failures, firstErr)
	if maxSeen > 1 {
		t.Errorf("%d exclusive holders of %q at once while its counter row was being deleted", maxSeen, key)
	}
}

// TestAuditHoldsGrantWithoutCounterRow: holds_grant locks the key's row
// of keys FOR KEY SHARE, so that no grant of the key is made until the
// user's transaction ends. With the row deleted (a counter loss) it can
// lock nothing, so it must answer false for a live grant: true would let
// another client be granted the key while the transaction that checked
// the first grant is open.
func TestAuditHoldsGrantWithoutCounterRow(t *testing.T) {
	url := serverURL(t)
	raw := rawPool(t, url)
	ctx := context.Background()
	a := newTestLocker(t, url, nil, &netCut{})
	key := auditKey("audit-holdsgrant")
	la, err := a.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(ctx, "DELETE FROM dlock.keys WHERE key = $1", key); err != nil {
		t.Fatal(err)
	}
	tx, err := raw.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var ok bool
	if err := tx.QueryRow(ctx, "SELECT dlock.holds_grant($1, $2)", key, int64(la.Token())).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	if ok {
		t.Fatal("holds_grant answered true for a grant whose key row is gone: it locked nothing, so another grant of the key could be made while this transaction is open")
	}
}
