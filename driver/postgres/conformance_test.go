package postgres

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver/drivertest"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestConformance runs the driver conformance suite against a real
// PostgreSQL server. The driver does every check: no subtest may skip.
func TestConformance(t *testing.T) {
	url := serverURL(t)
	raw := rawPool(t, url)
	drivertest.Run(t, func(t *testing.T) drivertest.Harness { return &harness{url: url, raw: raw, outage: outage} }, nil)
}

// outage is a harness on a server of the subtest's own, which the suite
// stops and starts.
func outage(t *testing.T) *drivertest.Outage {
	pg := testserver.StartPostgres(t, nil)
	h := &harness{url: pg.URL(), raw: rawPool(t, pg.URL())}
	return &drivertest.Outage{Harness: h, Stop: pg.Stop, Start: pg.Restart}
}

// outageSkips are the variants' skips: TestConformance checks outages.
var outageSkips = drivertest.Skips{
	"Outage/LockWaits":    "one server covers it (TestConformance)",
	"Outage/TryLockFails": "one server covers it (TestConformance)",
}

// TestConformancePgBouncer runs the suite through PgBouncer in
// transaction pooling mode, with Options.TransactionPooling: every check
// holds; waiters poll at the heartbeat instead of being woken, so the
// checks of prompt wake-ups do not apply.
func TestConformancePgBouncer(t *testing.T) {
	pg := testserver.SharedPostgres(t)
	b := testserver.StartPgBouncer(t, pg, "transaction")
	raw := rawPool(t, pg.URL())
	drivertest.Run(t, func(t *testing.T) drivertest.Harness {
		return &harness{url: b.URL(), raw: raw, opts: Options{TransactionPooling: true}, poll: true}
	}, drivertest.Skips{
		"Semaphore/FIFO":      "waiters poll behind a transaction pooler (no LISTEN): arrival order is kept by the queue, but the suite checks it only with prompt wake-ups",
		"Outage/LockWaits":    outageSkips["Outage/LockWaits"],
		"Outage/TryLockFails": outageSkips["Outage/TryLockFails"],
	})
}

// TestConformanceReplica runs the suite against a primary whose commits
// wait for its streaming standby (synchronous_standby_names), the
// arrangement under which a failover keeps every grant (TestFailover).
func TestConformanceReplica(t *testing.T) {
	pg := testserver.StartPostgres(t, &testserver.PostgresOptions{Replica: true})
	if _, err := pg.ExecNode(0, "ALTER SYSTEM SET synchronous_standby_names = '*'; SELECT pg_reload_conf()"); err != nil {
		t.Fatal(err)
	}
	url := pg.NodeURL(0)
	raw := rawPool(t, url)
	drivertest.Run(t, func(t *testing.T) drivertest.Harness { return &harness{url: url, raw: raw} }, outageSkips)
}

// serverURL is the superuser URL of the test binary's shared server.
func serverURL(t testing.TB) string {
	t.Helper()
	return testserver.SharedPostgres(t).URL()
}

// rawPool is the test's own pool, for tampering; closed at cleanup.
func rawPool(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// harness connects the conformance suite to the server. Every Locker
// dials through its own netCut, so that Crash cuts it off the way a dead
// process is: its connections drop and nothing is released.
type harness struct {
	url  string
	raw  *pgxpool.Pool // straight to the server
	opts Options
	poll bool // waiters are not woken (TransactionPooling)
	// outage starts a server for the Outage/ subtests (nil: they skip).
	outage func(t *testing.T) *drivertest.Outage
}

func (h *harness) NewLocker(t *testing.T, o *lock.Options) *lock.Locker {
	t.Helper()
	opts := h.opts
	if o != nil {
		opts.Options = *o
	}
	return newLockerWith(t, h.url, &opts, &netCut{})
}

// newTestLocker is a Locker that owns a pool of its own, dialing through
// cut.
func newTestLocker(t testing.TB, url string, o *lock.Options, cut *netCut) *lock.Locker {
	opts := &Options{}
	if o != nil {
		opts.Options = *o
	}
	return newLockerWith(t, url, opts, cut)
}

func newLockerWith(t testing.TB, url string, opts *Options, cut *netCut) *lock.Locker {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.DialFunc = cut.dial
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	d, lo := newDriver(pool, opts, true)
	l := lock.New(d, lo)
	cuts.Store(l, cut)
	t.Cleanup(func() { l.Close() })
	return l
}

var cuts sync.Map // *lock.Locker -> *netCut

func (h *harness) Crash(t *testing.T, l *lock.Locker) {
	c, ok := cuts.Load(l)
	if !ok {
		t.Fatal("Crash: not a Locker of this harness")
	}
	c.(*netCut).setDown(true)
}

func (h *harness) exec(ctx context.Context, sql string, args ...any) error {
	_, err := h.raw.Exec(ctx, sql, args...)
	return err
}

func (h *harness) DeleteKey(ctx context.Context, key string) error {
	return pgx.BeginFunc(ctx, h.raw, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "UPDATE dlock.keys SET holder = NULL, since = NULL, expires = NULL WHERE key = $1", key); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "DELETE FROM dlock.entries WHERE key = $1", key)
		return err
	})
}

func (h *harness) StealKey(ctx context.Context, key string) error {
	return pgx.BeginFunc(ctx, h.raw, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "DELETE FROM dlock.entries WHERE key = $1", key); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO dlock.keys (key, holder, token, since, expires)
			VALUES ($1, 'intruder', 0, clock_timestamp(), clock_timestamp() + interval '1 minute')
			ON CONFLICT (key) DO UPDATE SET holder = excluded.holder, token = excluded.token, since = excluded.since, expires = excluded.expires`, key)
		return err
	})
}

func (h *harness) DeleteCounter(ctx context.Context, key string) error {
	return h.exec(ctx, "DELETE FROM dlock.keys WHERE key = $1", key)
}

// Residue lists the key's grant in its row and its entries, expired ones
// included (tombstones are not state of a lease: they only refuse late
// requests).
func (h *harness) Residue(ctx context.Context, key string) ([]string, error) {
	rows, err := h.raw.Query(ctx, "SELECT holder FROM dlock.keys WHERE key = $1 AND holder IS NOT NULL UNION ALL (SELECT owner FROM dlock.entries WHERE key = $1 ORDER BY seq)", key)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

func (h *harness) Dump(ctx context.Context, key string) ([]string, error) {
	var out []string
	for _, q := range []string{
		"SELECT format('counter %s holder %s token=%s since=%s expires=%s', coalesce(counter::text, 'NULL'), holder, token, since, expires) FROM dlock.keys WHERE key = $1",
		"SELECT format('entry %s seq=%s mode=%s lim=%s granted=%s token=%s expires=%s since=%s joined=%s holds=%s', owner, seq, mode, lim, granted, token, expires, since, joined, holds) FROM dlock.entries WHERE key = $1 ORDER BY seq",
		"SELECT format('void %s expires=%s', owner, expires) FROM dlock.voids WHERE key = $1 ORDER BY owner",
	} {
		rows, err := h.raw.Query(ctx, q, key)
		if err != nil {
			return nil, err
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, err
		}
		out = append(out, got...)
	}
	return out, nil
}

func (h *harness) Caps() drivertest.Caps {
	return drivertest.Caps{
		Notify: !h.poll, Shared: true, DeletableCounter: true, Resume: true, Reentry: true, Permits: true,
		Inspect: &drivertest.InspectCaps{Tokens: true, SharedTokens: true, Remaining: true, Since: true, Waiters: true, WaiterSince: true},
		Outage:  h.outage, Notes: true,
	}
}

// netCut is a pgx DialFunc whose connections a test can cut: setDown(true)
// drops them and refuses new ones (a crash, or a partition until
// setDown(false)).
type netCut struct {
	mu    sync.Mutex
	down  bool
	conns []net.Conn
}

func (n *netCut) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.down {
		return nil, fmt.Errorf("netcut: %s cut by the test", addr)
	}
	c, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	n.conns = append(n.conns, c)
	return c, nil
}

func (n *netCut) setDown(down bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.down = down
	if down {
		for _, c := range n.conns {
			c.Close()
		}
		n.conns = nil
	}
}
