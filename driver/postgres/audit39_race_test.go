package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// hold is one lease as the witness saw it: from Lock's return to the
// start of its Unlock, or its Deadline when left to expire (monotonic
// clock), with its token.
type hold struct {
	start, end time.Time
	token      uint64
	shared     bool
	who        string
}

// witness records every hold of one key and checks them afterwards: no
// exclusive hold overlaps another hold, and a hold that starts after an
// exclusive one ended has a higher token.
type witness struct {
	mu    sync.Mutex
	holds []hold
	bad   int // violations found by a quiet check
}

func (w *witness) add(h hold) {
	w.mu.Lock()
	w.holds = append(w.holds, h)
	w.mu.Unlock()
}

// check reports each violation with errorf and returns how many it
// found (it stops after a few).
func (w *witness) check(errorf func(string, ...any)) int {
	hs := w.holds
	sort.Slice(hs, func(i, j int) bool { return hs[i].start.Before(hs[j].start) })
	bad := 0
	for i, a := range hs {
		for _, b := range hs[i+1:] {
			if !b.start.Before(a.end) {
				if !a.shared && b.token <= a.token {
					errorf("token fell: %s token %d starts after %s token %d ended", b.who, b.token, a.who, a.token)
					bad++
				}
				continue
			}
			if !a.shared || !b.shared {
				errorf("two holders: %s token %d [%v] and %s token %d [%v], overlapping %v",
					a.who, a.token, a.end.Sub(a.start), b.who, b.token, b.end.Sub(b.start), a.end.Sub(b.start))
				bad++
			}
		}
		if bad > 5 {
			return bad
		}
	}
	return bad
}

// hammer runs n Lockers (made by mk) for d on key: queued Locks (the
// fast path when free, check_turn3 otherwise), TryLocks, RLocks (grants
// in entries), and every eighth exclusive lease left to expire (TTL 400
// ms, no renewal); each exclusive holder also asks holds_grant in a
// transaction of its own. It returns the witness, checked: its
// violations are the test's errors unless quiet.
func hammer(t *testing.T, raw *pgxpool.Pool, mk func(i int) *lock.Locker, n int, key string, d time.Duration) *witness {
	return hammerIn(t, raw, "dlock", mk, n, key, d, false)
}

func hammerIn(t *testing.T, raw *pgxpool.Pool, schema string, mk func(i int) *lock.Locker, n int, key string, d time.Duration, quiet bool) *witness {
	w := &witness{}
	ctx := tctx(t, d+time.Minute)
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for i := range n {
		lk := mk(i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; time.Now().Before(end); j++ {
				who := fmt.Sprintf("locker %d op %d", i, j)
				op := rand.IntN(10)
				expire := op == 0
				var l *lock.Lease
				var err error
				switch {
				case expire:
					l, err = lk.Lock(ctx, key, lock.WithTTL(400*time.Millisecond), lock.WithDisableAutoRenew(true))
				case op < 6:
					l, err = lk.Lock(ctx, key, lock.WithTTL(5*time.Second))
				case op < 8:
					l, err = lk.TryLock(ctx, key, lock.WithTTL(5*time.Second))
				default:
					l, err = lk.RLock(ctx, key, lock.WithTTL(5*time.Second))
				}
				if errors.Is(err, lock.ErrHeld) {
					time.Sleep(time.Millisecond)
					continue
				}
				if err != nil {
					t.Errorf("%s: %v", who, err)
					return
				}
				h := hold{start: time.Now(), token: l.Token(), shared: op >= 8, who: who}
				if !h.shared {
					var ok bool
					err := pgx.BeginTxFunc(ctx, raw, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
						return tx.QueryRow(ctx, "SELECT "+schema+".holds_grant($1, $2)", key, int64(l.Token())).Scan(&ok)
					})
					if err != nil || !ok {
						select {
						case <-l.Done():
						default:
							if !quiet {
								t.Errorf("%s: holds_grant of a live lease (token %d): %v, %v", who, l.Token(), ok, err)
							}
						}
					}
				}
				time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
				if expire {
					<-l.Done()
					h.end = l.Deadline()
					w.add(h)
					continue
				}
				h.end = time.Now()
				select {
				case <-l.Done():
					h.end = l.Deadline()
				default:
				}
				w.add(h)
				if err := l.Unlock(ctx); err != nil && !errors.Is(err, lock.ErrNotHeld) {
					t.Errorf("%s: Unlock: %v", who, err)
				}
			}
		}()
	}
	wg.Wait()
	if quiet {
		w.bad = w.check(t.Logf)
	} else {
		w.check(t.Errorf)
	}
	return w
}

func summary(w *witness) string {
	ex, sh := 0, 0
	for _, h := range w.holds {
		if h.shared {
			sh++
		} else {
			ex++
		}
	}
	return fmt.Sprintf("%d exclusive and %d shared holds", ex, sh)
}

// TestAudit39HotKeyWitness: in-row grants (lock3's fast path,
// check_turn3's grant_row), shared grants in entries and expiries of
// the row's grant on one hot key: an external witness sees one
// exclusive holder at a time, tokens rising, holds_grant true for each.
func TestAudit39HotKeyWitness(t *testing.T) {
	url := envDB(t, "audit39_witness")
	raw := rawPool(t, url)
	w := hammer(t, raw, func(int) *lock.Locker { return newTestLocker(t, url, nil, &netCut{}) }, 6, auditKey("audit39-hot"), 8*time.Second)
	t.Log(summary(w))
}

// TestAudit39HotKeySerializableDefault: the same with the database's
// default_transaction_isolation serializable (the steps must set read
// committed themselves; holds_grant runs in a read committed
// transaction of the test's).
func TestAudit39HotKeySerializableDefault(t *testing.T) {
	url := envDB(t, "audit39_ser", "default_transaction_isolation=serializable")
	raw := rawPool(t, url)
	w := hammer(t, raw, func(int) *lock.Locker { return newTestLocker(t, url, nil, &netCut{}) }, 6, auditKey("audit39-ser"), 6*time.Second)
	t.Log(summary(w))
}

// TestAudit39HotKeyPgBouncer: the same through PgBouncer in transaction
// pooling mode (waiters poll; a step is one transaction on whichever
// server connection), half the Lockers straight to the server.
func TestAudit39HotKeyPgBouncer(t *testing.T) {
	pg := testserver.SharedPostgres(t)
	b := testserver.StartPgBouncer(t, pg, "transaction")
	url := serverURL(t)
	raw := rawPool(t, url)
	w := hammer(t, raw, func(i int) *lock.Locker {
		if i%2 == 0 {
			return newLockerWith(t, b.URL(), &Options{TransactionPooling: true}, &netCut{})
		}
		return newTestLocker(t, url, nil, &netCut{})
	}, 6, auditKey("audit39-bouncer"), 6*time.Second)
	t.Log(summary(w))
}

// TestAudit39WitnessHasTeeth: the witness catches a broken lock3 (its
// fast path without the test of the row's holder) in a schema of its
// own.
func TestAudit39WitnessHasTeeth(t *testing.T) {
	url := serverURL(t)
	raw := rawPool(t, url)
	ctx := tctx(t, time.Minute)
	const schema = "audit39_broken"
	script, _ := SchemaSQL(schema)
	raw.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
	t.Cleanup(func() { raw.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
	broken := strings.Replace(script, "WHERE x.key = k AND (x.holder IS NULL OR NOT x.expires > t) AND x.n = 0", "WHERE x.key = k AND x.n = 0", 1)
	if broken == script {
		t.Fatal("lock3's test of the row's holder not found: update the teeth")
	}
	if _, err := raw.Exec(ctx, broken); err != nil {
		t.Fatal(err)
	}
	o := &Options{Schema: schema, NoCreate: true}
	lks := []*lock.Locker{newLockerWith(t, url, o, &netCut{}), newLockerWith(t, url, o, &netCut{}), newLockerWith(t, url, o, &netCut{})}
	bad := 0
	for round := 0; round < 5 && bad == 0; round++ { // the fast path runs when no waiter is queued: not every round
		w := hammerIn(t, raw, schema, func(i int) *lock.Locker { return lks[i] }, 3, auditKey("audit39-teeth"), 3*time.Second, true)
		t.Logf("round %d: %s, %d violations", round, summary(w), w.bad)
		bad = w.bad
	}
	if bad == 0 {
		t.Fatal("the witness found nothing wrong with a lock3 that grants a held key")
	}
}
