package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// excl44 checks that grants of one key never overlap while their
// holders may still count on them, and that each grant's fencing token
// is above the last one's.
type excl44 struct {
	t       *testing.T
	mu      sync.Mutex
	holders map[string]<-chan struct{} // who holds: its lease's Done (nil: a raw client's grant of a long TTL)
	last    int64
	grants  atomic.Int64
}

func newExcl44(t *testing.T) *excl44 { return &excl44{t: t, holders: map[string]<-chan struct{}{}} }

// contend runs a goroutine per Locker of ls that takes key rounds times
// (each Lock within wait, TTL 10 s), holds it a moment under x's watch
// and unlocks it; where says how in failures. Wait on the group returned.
func (x *excl44) contend(ctx context.Context, ls []*lock.Locker, key string, rounds int, wait time.Duration, where string) *sync.WaitGroup {
	t := x.t
	var wg sync.WaitGroup
	for i, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range rounds {
				c, cancel := context.WithTimeout(ctx, wait)
				le, err := l.Lock(c, key, lock.WithTTL(10*time.Second))
				cancel()
				if err != nil {
					t.Errorf("Locker %d's Lock %s: %v", i, where, err)
					return
				}
				who := fmt.Sprintf("%d #%d", i, n)
				x.enter(who, int64(le.Token()), le.Done())
				time.Sleep(time.Millisecond)
				x.exit(who)
				if err := le.Unlock(ctx); err != nil {
					t.Errorf("Locker %d's Unlock: %v", i, err)
					return
				}
			}
		}()
	}
	return &wg
}

func (x *excl44) enter(who string, tok int64, done <-chan struct{}) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for o, d := range x.holders {
		live := true
		if d != nil {
			select {
			case <-d:
				live = false
			default:
			}
		}
		if live {
			x.t.Errorf("%s granted (token %d) while %s still holds", who, tok, o)
		}
	}
	if tok <= x.last {
		x.t.Errorf("%s granted token %d, not above the last grant's %d", who, tok, x.last)
	}
	x.last = max(x.last, tok)
	x.holders[who] = done
	x.grants.Add(1)
}

func (x *excl44) exit(who string) {
	x.mu.Lock()
	delete(x.holders, who)
	x.mu.Unlock()
}

func owner44() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// v7Step is a version 7 client's step on schema s through raw, without
// failing the test (it runs on other goroutines): lock3 (q: queued),
// check_turn3, or the clean-ups unlock3 and release3.
func v7Step(ctx context.Context, raw *pgxpool.Pool, s, sql string, args ...any) (int64, error) {
	var tok, retry, lim int64
	var voided bool
	err := raw.QueryRow(ctx, "SELECT tok, retry, other_lim, voided FROM "+s+".step_settings(), "+sql, args...).Scan(&tok, &retry, &lim, &voided)
	return tok, err
}

// v7Install runs schema_v7.sql the way a version 7 client's install
// does: under the schema's advisory lock, and not over a later version.
func v7Install(ctx context.Context, raw *pgxpool.Pool, s string) error {
	return pgx.BeginTxFunc(ctx, raw, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext($1))", "dlock schema "+s); err != nil {
			return err
		}
		var has bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1 AND p.proname = 'version')", s).Scan(&has); err != nil {
			return err
		}
		if has {
			var v int
			if err := tx.QueryRow(ctx, "SELECT "+s+".version()").Scan(&v); err != nil {
				return err
			}
			if v >= 7 {
				return nil
			}
		}
		_, err := tx.Exec(ctx, strings.ReplaceAll(schemaV7, "{{schema}}", s))
		return err
	})
}

// TestAudit44PGUpgradeMidRun: version 7 clients (TryLock-like lock3,
// queued lock3 then check_turn3) contend on one key with version 8
// Lockers (TryLock and Lock) while the first version 8 call installs
// version 8 over the running version 7 steps, and a version 7 install
// keeps racing it. No two grants overlap, tokens rise, both kinds get
// grants, and the schema ends at version 8 with version 8 bodies.
func TestAudit44PGUpgradeMidRun(t *testing.T) {
	ctx := tctx(t, time.Minute)
	url := serverURL(t)
	raw := rawPool(t, url)
	const s = "audit44_up"
	execAll(t, raw, "DROP SCHEMA IF EXISTS "+s+" CASCADE")
	if err := v7Install(ctx, raw, s); err != nil {
		t.Fatal(err)
	}
	key := auditKey("audit44-up")
	x := newExcl44(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var v7Grants, v8Grants atomic.Int64
	hold := func() { time.Sleep(2 * time.Millisecond) }
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	// Version 7 clients: one trying, one queued.
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stopped() {
				o := owner44()
				var tok int64
				var err error
				if i == 0 {
					tok, err = v7Step(ctx, raw, s, s+".lock3($1, $2, $3, false, $4, '')", key, o, int64(30_000_000), int64(3_000_000))
				} else {
					tok, err = v7Step(ctx, raw, s, s+".lock3($1, $2, $3, true, $4, '')", key, o, int64(30_000_000), int64(60_000_000))
					for end := time.Now().Add(5 * time.Second); err == nil && tok == 0 && time.Now().Before(end) && !stopped(); {
						time.Sleep(5 * time.Millisecond)
						tok, err = v7Step(ctx, raw, s, s+".check_turn3($1, $2, 0, 0, $3, $4, '')", key, o, int64(30_000_000), int64(60_000_000))
					}
					if err == nil && tok == 0 {
						_, err = raw.Exec(ctx, "SELECT "+s+".release3($1, $2, false, $3, true) FROM "+s+".step_settings()", key, o, int64(30_000_000))
					}
				}
				if err != nil {
					t.Errorf("a version 7 step: %v", err)
					return
				}
				if tok == 0 {
					time.Sleep(3 * time.Millisecond)
					continue
				}
				x.enter("v7 "+o, tok, nil)
				hold()
				x.exit("v7 " + o)
				v7Grants.Add(1)
				var ok bool
				if err := raw.QueryRow(ctx, "SELECT "+s+".unlock3($1, $2, $3) FROM "+s+".step_settings()", key, o, int64(30_000_000)).Scan(&ok); err != nil || !ok {
					t.Errorf("a version 7 unlock3: %v, %v", ok, err)
					return
				}
			}
		}()
	}
	waitFor(t, "version 7 grants", 20*time.Second, func() bool { return v7Grants.Load() >= 3 })
	// Version 8 Lockers, the first of whose calls installs version 8.
	for i := range 2 {
		l, _ := driverLocker(t, url, &Options{Schema: s})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; !stopped(); n++ {
				var ls *lock.Lease
				var err error
				if i == 0 {
					ls, err = l.TryLock(ctx, key, lock.WithTTL(10*time.Second))
				} else {
					c, cancel := context.WithTimeout(ctx, 5*time.Second)
					ls, err = l.Lock(c, key, lock.WithTTL(10*time.Second))
					cancel()
				}
				if errors.Is(err, lock.ErrHeld) || errors.Is(err, lock.ErrNotAcquired) {
					time.Sleep(3 * time.Millisecond)
					continue
				}
				if err != nil {
					t.Errorf("a version 8 lock: %v", err)
					return
				}
				who := fmt.Sprintf("v8-%d #%d", i, n)
				x.enter(who, int64(ls.Token()), ls.Done())
				hold()
				x.exit(who)
				v8Grants.Add(1)
				if err := ls.Unlock(ctx); err != nil {
					t.Errorf("a version 8 unlock: %v", err)
					return
				}
			}
		}()
	}
	// A version 7 client's install keeps racing the version 8 one.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stopped() {
			if err := v7Install(ctx, raw, s); err != nil {
				t.Errorf("a version 7 install: %v", err)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	waitFor(t, "version 8 grants", 20*time.Second, func() bool { return v8Grants.Load() >= 20 })
	base := v7Grants.Load()
	waitFor(t, "version 7 grants after the upgrade", 20*time.Second, func() bool { return v7Grants.Load() >= base+10 })
	close(stop)
	wg.Wait()
	var v int
	var body string
	if err := raw.QueryRow(ctx, "SELECT "+s+".version(), prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1 AND p.proname = 'acquire3'", s).Scan(&v, &body); err != nil {
		t.Fatal(err)
	}
	if v != schemaVersion || !strings.Contains(body, "row_held, inlined") {
		t.Errorf("after the race of installs: version %d, acquire3 inlined %v; want version %d, inlined", v, strings.Contains(body, "row_held, inlined"), schemaVersion)
	}
	t.Logf("grants: %d (version 7: %d, version 8: %d)", x.grants.Load(), v7Grants.Load(), v8Grants.Load())
}

// TestAudit44PGInstallRace: a version 7 and a version 8 client find the
// schema missing at once and queue on its install lock, in one order and
// then the other (the lock held until both wait): whichever installs
// first, the schema ends at version 8 (a version 7 install does not
// replace it), and the version 8 client's call works.
func TestAudit44PGInstallRace(t *testing.T) {
	ctx := tctx(t, time.Minute)
	url := serverURL(t)
	raw := rawPool(t, url)
	const s = "audit44_race"
	waiting := func(n int) {
		waitFor(t, fmt.Sprintf("%d installs waiting", n), 20*time.Second, func() bool {
			var w int
			raw.QueryRow(ctx, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND objid::text::bigint = (hashtext($1)::bigint & 4294967295)", "dlock schema "+s).Scan(&w)
			return w >= n
		})
	}
	for i := range 4 {
		execAll(t, raw, "DROP SCHEMA IF EXISTS "+s+" CASCADE")
		l, _ := driverLocker(t, url, &Options{Schema: s})
		gate, err := raw.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := gate.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext($1))", "dlock schema "+s); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var e7, e8 error
		v7 := func() { defer wg.Done(); e7 = v7Install(ctx, raw, s) }
		v8 := func() {
			defer wg.Done()
			ls, err := l.TryLock(ctx, auditKey("audit44-race"))
			if err == nil {
				err = ls.Unlock(ctx)
			}
			e8 = err
		}
		first, second := v7, v8
		if i%2 == 1 {
			first, second = v8, v7
		}
		wg.Add(2)
		go first()
		waiting(1)
		go second()
		waiting(2)
		gate.Rollback(ctx)
		wg.Wait()
		if e7 != nil || e8 != nil {
			t.Fatalf("round %d: version 7 install %v, version 8 TryLock %v", i, e7, e8)
		}
		var v int
		var body string
		if err := raw.QueryRow(ctx, "SELECT "+s+".version(), prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1 AND p.proname = 'check_turn3'", s).Scan(&v, &body); err != nil {
			t.Fatal(err)
		}
		if v != schemaVersion || !strings.Contains(body, "grant_row, inlined") {
			t.Fatalf("round %d: version %d after the race, check_turn3 inlined %v", i, v, strings.Contains(body, "grant_row, inlined"))
		}
		l.Close()
	}
	execAll(t, raw, "DROP SCHEMA IF EXISTS "+s+" CASCADE")
}
