package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

func tctx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestHoldsGrantRollsBackStaleWrite: the check a user's transaction makes
// (dlock.holds_grant) lets the holder's write commit, refuses the write
// of a holder whose lease expired and was granted to another, and keeps
// any other grant of the key from being made while the checking
// transaction runs.
func TestHoldsGrantRollsBackStaleWrite(t *testing.T) {
	url := serverURL(t)
	raw := rawPool(t, url)
	ctx := tctx(t, 30*time.Second)
	if _, err := raw.Exec(ctx, "CREATE TABLE IF NOT EXISTS holds_grant_test (k text PRIMARY KEY, v text, token bigint)"); err != nil {
		t.Fatal(err)
	}
	key := "holds-grant/" + t.Name() + "/" + time.Now().Format(time.RFC3339Nano)
	a := newTestLocker(t, url, &lock.Options{TTL: 500 * time.Millisecond, DisableAutoRenew: true}, &netCut{})
	b := newTestLocker(t, url, nil, &netCut{})

	// write is what a program guarded by the lease does: the check and
	// the write in one transaction, rolled back when the check fails.
	write := func(lease *lock.Lease, v string, during func()) (bool, error) {
		var ok bool
		err := pgx.BeginFunc(ctx, raw, func(tx pgx.Tx) error {
			if err := tx.QueryRow(ctx, "SELECT dlock.holds_grant($1, $2)", key, int64(lease.Token())).Scan(&ok); err != nil {
				return err
			}
			if !ok {
				return errStale
			}
			if _, err := tx.Exec(ctx, "INSERT INTO holds_grant_test VALUES ($1, $2, $3) ON CONFLICT (k) DO UPDATE SET v = $2, token = $3", key, v, int64(lease.Token())); err != nil {
				return err
			}
			if during != nil {
				during()
			}
			return nil
		})
		if errors.Is(err, errStale) {
			return false, nil
		}
		return ok, err
	}

	la, err := a.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	// A's write while it holds commits; a Lock of B made during it is
	// granted only after the transaction ends, although A's lease expires
	// meanwhile.
	var bGranted, commitSent time.Time
	var lb *lock.Lease
	var mu sync.Mutex // B's goroutine sets lb and bGranted
	committed, err := write(la, "a", func() {
		done := make(chan struct{})
		go func() {
			defer close(done)
			l, err := b.Lock(ctx, key)
			if err != nil {
				t.Errorf("B's Lock: %v", err)
			}
			mu.Lock()
			lb, bGranted = l, time.Now()
			mu.Unlock()
		}()
		select {
		case <-done:
			t.Errorf("B was granted the key while A's checking transaction ran")
		case <-time.After(time.Second): // past A's TTL
		}
		// The COMMIT is sent next; the server may end the transaction,
		// and grant B, before its reply reaches A.
		commitSent = time.Now()
	})
	if err != nil || !committed {
		t.Fatalf("A's write while holding: committed=%v err=%v; want committed", committed, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	granted := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return lb != nil
	}
	for !granted() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if lb == nil {
		t.Fatal("B was not granted the key after A's transaction")
	}
	if bGranted.Before(commitSent) {
		t.Errorf("B granted at %v, before A's transaction sent its COMMIT at %v", bGranted, commitSent)
	}
	// A is stale now: its write is rolled back.
	committed, err = write(la, "stale", nil)
	if err != nil || committed {
		t.Fatalf("A's write after B was granted: committed=%v err=%v; want rolled back", committed, err)
	}
	var v string
	if err := raw.QueryRow(ctx, "SELECT v FROM holds_grant_test WHERE k = $1", key).Scan(&v); err != nil || v != "a" {
		t.Errorf("the guarded row holds %q (%v); want A's first write, %q", v, err, "a")
	}
	if ok, err := write(lb, "b", nil); err != nil || !ok {
		t.Errorf("B's write: committed=%v err=%v", ok, err)
	}
}

var errStale = errors.New("stale lease")

// TestTokensOnClockScale: tokens are the server's clock in microseconds
// (or just above it), the scale of the Redis drivers' tokens, and keep
// rising after the counter is lost.
func TestTokensOnClockScale(t *testing.T) {
	url := serverURL(t)
	raw := rawPool(t, url)
	ctx := tctx(t, 30*time.Second)
	l := newTestLocker(t, url, nil, &netCut{})
	key := "token-scale/" + time.Now().Format(time.RFC3339Nano)
	before := time.Now()
	a, err := l.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	a.Unlock(ctx)
	got := time.UnixMicro(int64(a.Token()))
	if d := got.Sub(before); d < -time.Second || d > 5*time.Second {
		t.Errorf("token %d is %v as a microsecond clock, %v from the client's clock; want the server's clock", a.Token(), got, d)
	}
	if _, err := raw.Exec(ctx, "UPDATE dlock.keys SET counter = counter + 1000000000 WHERE key = $1", key); err != nil {
		t.Fatal(err)
	}
	b, err := l.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	b.Unlock(ctx)
	if b.Token() != a.Token()+1000000001 {
		t.Errorf("token after the counter moved ahead of the clock: %d; want counter+1 = %d", b.Token(), a.Token()+1000000001)
	}
	if _, err := raw.Exec(ctx, "DELETE FROM dlock.keys WHERE key = $1", key); err != nil {
		t.Fatal(err)
	}
	c, err := l.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	c.Unlock(ctx)
	if c.Token() <= a.Token() {
		t.Errorf("token after the counter was lost: %d; want above the clock-scale token %d given before", c.Token(), a.Token())
	}
}

// TestNoCreate: with NoCreate, a missing schema is an error that says
// what to run; SchemaSQL's script makes it, and the Locker then works.
func TestNoCreate(t *testing.T) {
	url := serverURL(t)
	raw := rawPool(t, url)
	ctx := tctx(t, 60*time.Second)
	schema := "dlock_nocreate_test"
	if _, err := raw.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
	pool := rawPool(t, url)
	l := New(pool, &Options{Schema: schema, NoCreate: true})
	defer l.Close()
	_, err := l.TryLock(ctx, "k")
	if err == nil || !strings.Contains(err.Error(), "SchemaSQL") || !strings.Contains(err.Error(), schema) {
		t.Fatalf("TryLock with NoCreate and no schema: %v; want an error naming the schema and SchemaSQL", err)
	}
	script, err := SchemaSQL(schema)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(ctx, script); err != nil {
		t.Fatalf("running SchemaSQL's script: %v", err)
	}
	lease, err := l.TryLock(ctx, "k")
	if err != nil {
		t.Fatalf("TryLock after the script ran: %v", err)
	}
	lease.Unlock(ctx)
	if _, err := SchemaSQL("Bad-Name"); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("SchemaSQL(%q): %v; want ErrInvalid", "Bad-Name", err)
	}
	bad := New(pool, &Options{Schema: "x; DROP TABLE y"})
	defer bad.Close()
	if _, err := bad.TryLock(ctx, "k"); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("TryLock with a bad Options.Schema: %v; want ErrInvalid", err)
	}
}

// TestNilPool: New(nil, nil) gives a Locker whose calls fail with
// ErrInvalid, and no panic.
func TestNilPool(t *testing.T) {
	l := New(nil, nil)
	defer l.Close()
	if _, err := l.TryLock(context.Background(), "k"); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("TryLock over a nil pool: %v; want ErrInvalid", err)
	}
}

// TestForgedWakeGrantsNothing: a role with no right on dlock's schema
// can send the notification that wakes a waiter (anyone may NOTIFY), but
// the waiter's own step decides: it stays waiting while the key is held.
func TestForgedWakeGrantsNothing(t *testing.T) {
	url := serverURL(t)
	raw := rawPool(t, url)
	ctx := tctx(t, 30*time.Second)
	if _, err := raw.Exec(ctx, "DROP ROLE IF EXISTS dlock_forger"); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(ctx, "CREATE ROLE dlock_forger LOGIN PASSWORD 'forger'"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Exec(context.Background(), "DROP ROLE IF EXISTS dlock_forger") })
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.User, cfg.ConnConfig.Password = "dlock_forger", "forger"
	forger, err := pgx.ConnectConfig(ctx, cfg.ConnConfig)
	if err != nil {
		t.Fatal(err)
	}
	defer forger.Close(context.Background())
	if _, err := forger.Exec(ctx, "SELECT * FROM dlock.entries"); err == nil {
		t.Fatal("the forger's role can read dlock's tables; the test needs one that cannot")
	}

	key := "forged-wake/" + time.Now().Format(time.RFC3339Nano)
	holder := newTestLocker(t, url, nil, &netCut{})
	waiterL := newTestLocker(t, url, nil, &netCut{})
	held, err := holder.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := waiterL.Lock(tctx(t, 3*time.Second), key)
		if err == nil {
			l.Unlock(ctx)
		}
		got <- err
	}()
	var owner string
	for owner == "" {
		st, err := holder.Inspect(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Waiters) > 0 {
			owner = st.Waiters[0].Owner
		}
		time.Sleep(10 * time.Millisecond)
	}
	for range 20 {
		if _, err := forger.Exec(ctx, "SELECT pg_notify('dlock', $1)", owner); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := <-got; !errors.Is(err, lock.ErrNotAcquired) {
		t.Errorf("waiter after forged wake-ups while the key is held: %v; want ErrNotAcquired at its context's end", err)
	}
	if held.Err() != nil {
		t.Errorf("the holder's lease ended: %v", held.Err())
	}
	held.Unlock(ctx)
}

// TestFailover: with synchronous replication (synchronous_standby_names
// on the primary), a grant committed on the primary is on the standby
// when it is promoted: the key stays held there until the holder's TTL,
// and the next token is above the holder's.
func TestFailover(t *testing.T) {
	pg := testserver.StartPostgres(t, &testserver.PostgresOptions{Replica: true})
	pg.RequireFaults(t)
	// On the primary alone (ALTER SYSTEM is not replicated): commits wait
	// for the standby.
	if _, err := pg.ExecNode(0, "ALTER SYSTEM SET synchronous_standby_names = '*'; SELECT pg_reload_conf()"); err != nil {
		t.Fatal(err)
	}
	ctx := tctx(t, 90*time.Second)
	key := "failover"
	holder := newTestLocker(t, pg.NodeURL(0), &lock.Options{TTL: 3 * time.Second}, &netCut{})
	held, err := holder.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	granted := time.Now()
	if err := pg.Node(0).Kill(); err != nil {
		t.Fatal(err)
	}
	if err := pg.Promote(); err != nil {
		t.Fatal(err)
	}
	other := newTestLocker(t, pg.NodeURL(1), &lock.Options{TTL: 3 * time.Second}, &netCut{})
	var next *lock.Lease
	for {
		next, err = other.TryLock(ctx, key)
		if err == nil || !isReadOnly(err) {
			break
		}
		time.Sleep(50 * time.Millisecond) // the standby is still being promoted
	}
	heldUntil := granted.Add(3 * time.Second)
	if err == nil {
		if time.Now().Before(heldUntil) {
			t.Fatalf("the promoted standby granted the key %v before the holder's TTL ends: the grant was lost in the failover", time.Until(heldUntil))
		}
	} else if !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryLock on the promoted standby: %v", err)
	}
	select {
	case <-held.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the holder's lease did not end after its primary died")
	}
	if next == nil {
		next, err = other.Lock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
	}
	if next.Token() <= held.Token() {
		t.Errorf("token after the failover %d; want above the holder's %d", next.Token(), held.Token())
	}
	next.Unlock(ctx)
}

// isReadOnly reports whether err is a standby's refusal of a write.
func isReadOnly(err error) bool {
	return strings.Contains(err.Error(), "read-only transaction") || strings.Contains(err.Error(), "recovery")
}

// schemaHashes pins schema.sql at each version: a Locker installs the
// script only where version() gives another number, so a change to the
// script without a new version would never reach a database that has
// the old one. Change the script, bump schemaVersion, add its hash here.
// (Version 5 was repinned once for a fix to the header comment, which no
// database stores; version 9 once before it was released, for audit 46's
// ALWAYS triggers.)
var schemaHashes = map[int]string{1: "68af33a11acde89d", 2: "2b657873d50a4321", 3: "487e811bb7a43c4a", 4: "744dc3b4ab9d9976", 5: "7212eb74f1acd6e4", 6: "e0e498f0eda27f67", 7: "4da98aca1b5a5344", 8: "2ccbd48860669be0", 9: "a08eab09647bc560"}

func TestSchemaVersionBumped(t *testing.T) {
	sum := sha256.Sum256([]byte(schemaSQL))
	got := hex.EncodeToString(sum[:8])
	if want := schemaHashes[schemaVersion]; got != want {
		t.Errorf("schema.sql's hash is %s, and version %d was pinned at %q: bump schemaVersion (and version() in the script) and pin the new hash", got, schemaVersion, want)
	}
	if !strings.Contains(schemaSQL, fmt.Sprintf("SELECT %d $$", schemaVersion)) {
		t.Errorf("schema.sql's version() does not return schemaVersion %d", schemaVersion)
	}
}

// TestPgBouncerTransactionPooling: through PgBouncer in transaction mode
// (a server connection lent per transaction, no named statements kept),
// with Options.TransactionPooling, every kind of call works: grants,
// a held key, a waiter served by polling, shared leases, permits,
// refresh, Resume, Inspect and the in-transaction check. (The whole
// conformance suite runs through it in make conformance:
// TestConformancePgBouncer.)
func TestPgBouncerTransactionPooling(t *testing.T) {
	pg := testserver.SharedPostgres(t)
	b := testserver.StartPgBouncer(t, pg, "transaction")
	ctx := tctx(t, 60*time.Second)
	newL := func() *lock.Locker {
		return newLockerWith(t, b.URL(), &Options{TransactionPooling: true}, &netCut{})
	}
	a, w := newL(), newL()
	key := "pgbouncer/" + time.Now().Format(time.RFC3339Nano)
	held, err := a.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.TryLock(ctx, key); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("TryLock of a held key: %v; want ErrHeld", err)
	}
	if err := held.Refresh(ctx, 10*time.Second); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	handle, err := held.Detach()
	if err != nil {
		t.Fatal(err)
	}
	resumed, err := w.Resume(ctx, handle)
	if err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if resumed.Token() != held.Token() {
		t.Errorf("Resume's token %d, want %d", resumed.Token(), held.Token())
	}
	var ok bool
	if err := pgx.BeginFunc(ctx, rawPool(t, b.URL()), func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, "SELECT dlock.holds_grant($1, $2)", pgx.QueryExecModeExec, key, int64(resumed.Token())).Scan(&ok)
	}); err != nil || !ok {
		t.Errorf("holds_grant through PgBouncer: %v, %v; want true", ok, err)
	}
	st, err := a.Inspect(ctx, key)
	if err != nil || len(st.Holders) != 1 {
		t.Fatalf("Inspect: %+v, %v; want one holder", st, err)
	}
	waited := make(chan error, 1)
	go func() {
		l, err := a.Lock(ctx, key)
		if err == nil {
			err = l.Unlock(ctx)
		}
		waited <- err
	}()
	time.Sleep(300 * time.Millisecond)
	if err := resumed.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("the waiter: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not served within 5s of the release (it polls every second)")
	}
	rw := w
	r1, err := rw.RLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := a.TryRLock(ctx, key)
	if err != nil {
		t.Fatalf("a second reader: %v", err)
	}
	r1.Unlock(ctx)
	r2.Unlock(ctx)
	sem := a
	if err := sem.Supports(lock.Permits); err != nil {
		t.Fatal(err)
	}
	p1, err := sem.Acquire(ctx, key+"/sem", 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sem.TryAcquire(ctx, key+"/sem", 1); !errors.Is(err, lock.ErrHeld) {
		t.Errorf("a second permit of one: %v; want ErrHeld", err)
	}
	p1.Unlock(ctx)
}
