package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgxpool"
)

// driverCycleAllocs bounds the allocations of a driver's Acquire and
// Release on a free key, under a context that never ends (pgx's context
// watcher adds its own under one that can).
const driverCycleAllocs = 6

// driverLocker is a Locker over a pool of its own on url, and its driver.
func driverLocker(t testing.TB, url string, o *Options) (*lock.Locker, *pgDriver) {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	d, lo := newDriver(pool, o, true)
	l := lock.New(d, lo)
	t.Cleanup(func() { l.Close() })
	return l, d
}

// cycle takes key with TryLock and releases it, failing t on an error.
func cycle(t *testing.T, l *lock.Locker, key string) {
	t.Helper()
	ctx := tctx(t, 30*time.Second)
	ls, err := l.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("TryLock: %v", err)
	}
	if err := ls.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
}

// TestFastSteps: on a server with its default settings, a TryLock and
// its Unlock are sent in the fast form (the plain UPDATEs, or lock3 and
// unlock3, prepared, not wrapped) and nothing is refused; with Options.TransactionPooling every
// step is wrapped.
func TestFastSteps(t *testing.T) {
	url := serverURL(t)
	l, d := driverLocker(t, url, nil)
	key := auditKey("fast")
	cycle(t, l, key)
	cycle(t, l, key)
	cycle(t, l, auditKey("fast"))
	// A new key's first Lock finds no row: lock3 makes it (and counts its
	// n); every other step is a plain one.
	if runs, plain, refused := d.fastRuns.Load(), d.plainRuns.Load(), d.fastRefusals.Load(); runs != 2 || plain != 4 || refused != 0 {
		t.Errorf("%d fast steps run, %d plain, %d refused; want 2 (the new keys' lock3), 4 and 0", runs, plain, refused)
	}
	// A queued Lock: its joining step (lock3) and its turn (check_turn3)
	// are fast too.
	ctx := tctx(t, 30*time.Second)
	key = auditKey("fast-queued")
	held, err := l.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	w, dw := driverLocker(t, url, nil)
	got := make(chan *lock.Lease, 1)
	go func() {
		ls, err := w.Lock(ctx, key)
		if err != nil {
			t.Error(err)
		}
		got <- ls
	}()
	waitFor(t, "the waiter's entry", 10*time.Second, func() bool { return dw.fastRuns.Load() >= 1 })
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if ls := <-got; ls != nil {
		if runs, refused := dw.fastRuns.Load(), dw.fastRefusals.Load(); runs < 2 || refused != 0 {
			t.Errorf("the waiter: %d fast steps run, %d refused; want its lock3 and at least one check_turn3, none refused", runs, refused)
		}
		ls.Unlock(ctx)
	}
	lp, dp := driverLocker(t, url, &Options{TransactionPooling: true})
	cycle(t, lp, auditKey("fast-pooled"))
	if runs := dp.fastRuns.Load(); runs != 0 {
		t.Errorf("with TransactionPooling, %d fast steps run; want none", runs)
	}
}

// TestFastStepRefused: where the session's settings are not what the
// wrapper makes them (a database's default isolation, synchronous_commit
// off or local, a statement_timeout, read-only transactions), lock3 and
// unlock3 refuse to run unwrapped with SQLSTATE DL001, the driver sends
// the step again wrapped, and later steps of that connection go wrapped
// at once. Without the check the fast form would run there: a grant
// committed asynchronously (lost by a crash: TestEnv38SynchronousCommitOff),
// judged by an old snapshot (TestEnv38RepeatableReadTwoHolders), or
// failed by the timeout.
func TestFastStepRefused(t *testing.T) {
	for _, tc := range []struct{ name, db, setting string }{
		{"RepeatableRead", "fast_rr", "default_transaction_isolation=repeatable read"},
		{"Serializable", "fast_ser", "default_transaction_isolation=serializable"},
		{"SynchronousCommitOff", "fast_sync_off", "synchronous_commit=off"},
		{"SynchronousCommitLocal", "fast_sync_local", "synchronous_commit=local"},
		{"StatementTimeout", "fast_stmt_timeout", "statement_timeout=10s"},
		{"ReadOnly", "fast_ro", "default_transaction_read_only=on"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := envDB(t, tc.db, tc.setting)
			l, d := driverLocker(t, url+sep(url)+"pool_max_conns=1", nil)
			cycle(t, l, auditKey("fast-refused"))
			cycle(t, l, auditKey("fast-refused"))
			if runs, refused := d.fastRuns.Load(), d.fastRefusals.Load(); runs != 0 || refused != 1 {
				t.Errorf("%d fast steps run, %d refused; want none run, and one refusal (the connection's first)", runs, refused)
			}
			ctx := tctx(t, 30*time.Second)
			raw := rawPool(t, url)
			for _, q := range []string{
				"SELECT dlock.unlock3('fast-refused', 'nobody', 1000)",
				"SELECT tok FROM dlock.lock3('fast-refused-free', 'nobody', 1000, false, 1000, '')",
				"SELECT tok FROM dlock.check_turn3('fast-refused', 'nobody', 0, 0, 1000, 1000, '')",
			} {
				_, err := raw.Exec(ctx, q)
				var pe *pgconn.PgError
				if !errors.As(err, &pe) || pe.Code != errRefusedFast {
					t.Errorf("%s unwrapped under %s: %v; want SQLSTATE %s", q, tc.setting, err, errRefusedFast)
				}
			}
		})
	}
}

// TestFastStepSessionChanged: a connection whose session is changed
// after its fast steps ran (a user's SET on a shared pool; a server
// connection a pooler lends with another client's settings) has its
// next fast step refused, and that step is sent wrapped.
func TestFastStepSessionChanged(t *testing.T) {
	url := serverURL(t)
	l, d := driverLocker(t, url+sep(url)+"pool_max_conns=1", nil)
	key := auditKey("fast-changed")
	cycle(t, l, key)
	ctx := tctx(t, 30*time.Second)
	for _, set := range []string{"SET synchronous_commit = off", "SET default_transaction_isolation = 'repeatable read'"} {
		t.Run(set, func(t *testing.T) {
			d.pool.Reset()
			cycle(t, l, key) // a new connection
			c, err := d.pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Exec(ctx, set)
			c.Release()
			if err != nil {
				t.Fatal(err)
			}
			runs, refused := d.fastRuns.Load(), d.fastRefusals.Load()
			cycle(t, l, key)
			if d.fastRuns.Load() != runs || d.fastRefusals.Load() != refused+1 {
				t.Errorf("after %s: %d more fast steps run, %d more refused; want none run and one refused",
					set, d.fastRuns.Load()-runs, d.fastRefusals.Load()-refused)
			}
		})
	}
}

// TestFastStepPgBouncerSession: through PgBouncer in transaction mode,
// a server connection keeps a session setting another client made (SET
// outside a transaction): lock3 run there unwrapped is refused (the
// check runs on the server connection that runs the step). A Locker
// with TransactionPooling sends every step wrapped there and works.
func TestFastStepPgBouncerSession(t *testing.T) {
	pg := testserver.SharedPostgres(t)
	b := testserver.StartPgBouncer(t, pg, "transaction")
	ctx := tctx(t, 60*time.Second)
	cfg, err := pgconn.ParseConfig(b.URL())
	if err != nil {
		t.Fatal(err)
	}
	other, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	c, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	// PgBouncer lends the server connection released last: mostly the one
	// the other client changed just before (the setting read in the same
	// statement says which it was).
	for try := 0; ; try++ {
		if _, err := other.Exec(ctx, "SET synchronous_commit = off").ReadAll(); err != nil {
			t.Fatal(err)
		}
		res := c.ExecParams(ctx, "SELECT current_setting('synchronous_commit'), dlock.unlock3('fast-bouncer', 'nobody', 1000)", nil, nil, nil, nil).Read()
		var pe *pgconn.PgError
		if errors.As(res.Err, &pe) && pe.Code == errRefusedFast {
			break
		}
		if res.Err != nil || len(res.Rows) != 1 || string(res.Rows[0][0]) == "off" || try == 10 {
			t.Fatalf("unlock3 unwrapped on a server connection with another client's synchronous_commit = off: %q, %v; want SQLSTATE %s", res.Rows, res.Err, errRefusedFast)
		}
	}
	l, d := driverLocker(t, b.URL(), &Options{TransactionPooling: true})
	cycle(t, l, auditKey("fast-bouncer"))
	if d.fastRuns.Load() != 0 {
		t.Error("fast steps run with TransactionPooling")
	}
}

// TestFastTextNotNull: the fast path's buffers keep an empty text apart
// from NULL, both ways: an empty argument is sent as an empty text (not
// NULL), and an empty column is read as an empty value (not nil, which
// the steps' readers take for NULL).
func TestFastTextNotNull(t *testing.T) {
	ctx := tctx(t, 30*time.Second)
	pc, err := pgconn.Connect(ctx, serverURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close(context.Background())
	vals, err := textValues([]int{0, 1, 2}, []any{"", int64(-12), false})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := readRows(pc.ExecParams(ctx, "SELECT $1::text IS NULL, $1::text, NULL::text, $2::int8, $3::bool, ''::text", vals, nil, nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || len(rows[0]) != 6 {
		t.Fatalf("rows %q, want one of 6 columns", rows)
	}
	r := rows[0]
	if string(r[0]) != "f" || r[1] == nil || len(r[1]) != 0 || r[2] != nil || string(r[3]) != "-12" || string(r[4]) != "f" || r[5] == nil || len(r[5]) != 0 {
		t.Errorf("row %q (nil: %v %v %v); want f, empty, NULL, -12, f, empty", r, r[1] == nil, r[2] == nil, r[5] == nil)
	}
	// Alone, an empty value leaves its buffer empty.
	if vals, err = textValues([]int{0}, []any{""}); err != nil {
		t.Fatal(err)
	}
	rows, err = readRows(pc.ExecParams(ctx, "SELECT CASE WHEN $1::text IS NULL THEN NULL ELSE $1::text END", vals, nil, nil, nil))
	if err != nil || len(rows) != 1 || len(rows[0]) != 1 || rows[0][0] == nil || len(rows[0][0]) != 0 {
		t.Errorf("rows %q, %v; want one empty value, not NULL", rows, err)
	}
}

// TestFastNoDescribe: once its statements are prepared on a connection,
// a fast step is Bind, Execute and Sync, without a Describe (its
// statement's description, kept from the Prepare, gives the result's
// columns), and the server sends no RowDescription back.
func TestFastNoDescribe(t *testing.T) {
	ctx := tctx(t, 30*time.Second)
	cfg, err := pgxpool.ParseConfig(serverURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1 // every step on the connection traced below
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	d, lo := newDriver(pool, &Options{Options: lock.Options{DisableAutoRenew: true}}, true)
	l := lock.New(d, lo)
	defer l.Close()
	key := auditKey("fast-describe")
	cycle(t, l, key) // makes the key's row, and prepares lock3, lock9 and unlock9
	cycle(t, l, key)
	c, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var trace strings.Builder
	fe := c.Conn().PgConn().Frontend()
	fe.Trace(&trace, pgproto3.TracerOptions{SuppressTimestamps: true})
	c.Release()
	plain := d.plainRuns.Load()
	cycle(t, l, key)
	fe.Untrace()
	if n := d.plainRuns.Load() - plain; n != 2 {
		t.Fatalf("%d plain steps; want the Lock's and the Unlock's", n)
	}
	got := trace.String()
	if !strings.Contains(got, "\tBind\t") || !strings.Contains(got, "\tExecute\t") {
		t.Fatalf("no Bind and Execute traced:\n%s", got)
	}
	if strings.Contains(got, "Describe") {
		t.Errorf("a Describe sent or a RowDescription received with the steps:\n%s", got)
	}
}

// TestFastStepAllocs: a fast step's arguments take one allocation
// (textValues), their boxes in the step's ...any stay on the caller's
// stack, and reading its one row takes one more than pgx's own
// (readRows). A driver's Acquire and Release of a free key, which the
// plain steps grant and release, take driverCycleAllocs together.
func TestFastStepAllocs(t *testing.T) {
	key, owner, ttl := auditKey("fast-allocs"), "d00bb303036775c7f2c5d38be1301fc6", int64(30000000)
	if n := testing.AllocsPerRun(100, func() {
		if _, err := textValues([]int{0, 1, 2}, []any{key, owner, ttl}); err != nil {
			t.Fatal(err)
		}
	}); n != 1 {
		t.Errorf("textValues: %v allocations; want 1", n)
	}
	ctx := context.Background() // no context watcher: its allocations are pgx's
	url := serverURL(t)
	pc, err := pgconn.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close(ctx)
	sd, err := pc.Prepare(ctx, "allocs", "SELECT $1::int8, 0::int8, 0::int8, false", []uint32{oidInt8})
	if err != nil {
		t.Fatal(err)
	}
	vals := [][]byte{[]byte("1764861234567890")}
	pgx := testing.AllocsPerRun(100, func() {
		if _, err := pc.ExecStatement(ctx, sd, vals, nil, nil).Close(); err != nil {
			t.Fatal(err)
		}
	})
	read := testing.AllocsPerRun(100, func() {
		if rows, err := readRows(pc.ExecStatement(ctx, sd, vals, nil, nil)); err != nil || len(rows) != 1 || string(rows[0][0]) != "1764861234567890" {
			t.Fatalf("rows %q, %v", rows, err)
		}
	})
	if read-pgx != 1 {
		t.Errorf("readRows: %v allocations beyond pgx's %v; want 1", read-pgx, pgx)
	}

	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := newDriver(pool, nil, true)
	defer d.Close()
	d.sweep.close() // no sweep's allocations in the count
	l := &driver.Lease{Key: key, Mode: driver.Exclusive, TTL: 30 * time.Second}
	cycle := func() {
		l.Owner = owner
		if err := d.Acquire(ctx, l); err != nil {
			t.Fatal(err)
		}
		if err := d.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	cycle() // makes the key's row, prepares the steps
	plain := d.plainRuns.Load()
	if n := testing.AllocsPerRun(100, cycle); n > driverCycleAllocs {
		t.Errorf("Acquire and Release: %v allocations; want at most %d", n, driverCycleAllocs)
	}
	if n := d.plainRuns.Load() - plain; n != 202 {
		t.Errorf("%d plain steps; want 202", n)
	}
}
