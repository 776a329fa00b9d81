package postgres

import (
	"context"
	"errors"
	mrand "math/rand/v2"
	"net"
	neturl "net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestAudit48CancelledInspectFreesSlot: an Inspect whose context ends
// while the network holds its query leaves its connection closed by pgx,
// which (v5.11 and later) drains the socket for up to 15 s before closing
// it; the pool's slot stays taken until then, so on a one-connection pool
// the next Lock of another key waited for the drain.
func TestAudit48CancelledInspectFreesSlot(t *testing.T) {
	url := serverURL(t)
	ctx := context.Background()
	px := newPGProxy(t, serverAddr(t, url))
	l := proxiedLocker(t, url, px, 1, nil)
	warm, err := l.Lock(ctx, auditKey("audit48-warm"))
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	px.holdAll()
	ictx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	start := time.Now()
	_, err = l.Inspect(ictx, auditKey("audit48-inspect"))
	cancel()
	if err == nil {
		t.Fatal("Inspect through a held network answered")
	}
	t.Logf("Inspect returned after %v", time.Since(start))
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("a cancelled Inspect returned after %v", d)
	}

	// Connections made from now on pass.
	lctx, lcancel := context.WithTimeout(ctx, 3*time.Second)
	defer lcancel()
	start = time.Now()
	ls, err := l.Lock(lctx, auditKey("audit48-after-inspect"))
	if err != nil {
		t.Fatalf("a Lock on a healthy path after a cancelled Inspect: %v after %v (the pool's only slot still taken)", err, time.Since(start))
	}
	t.Logf("the next Lock took %v", time.Since(start))
	ls.Unlock(ctx)
	px.deliver()
}

// TestAudit48ManyCancelledLocks: 50 Locks of a held key on a pool of 2,
// each cancelled while the network holds what the pool's open
// connections send (the hold is renewed before each Lock, so the
// connections a Lock's clean-up opened are held for the next one). Each
// returns promptly; then, the held bytes still on the network, a Lock of
// another key on new connections succeeds promptly (no slot waits for
// pgx's 15 s drain); once the held bytes reach the server late and the
// holder unlocks, nothing of the cancelled calls is left on the key.
func TestAudit48ManyCancelledLocks(t *testing.T) {
	url := serverURL(t)
	raw := rawPool(t, url)
	ctx := context.Background()
	holder := newTestLocker(t, url, nil, &netCut{})
	px := newPGProxy(t, serverAddr(t, url))
	l := openProxied(t, url, px, 2)
	key := auditKey("audit48-many")
	lh, err := holder.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer lh.Unlock(ctx)
	warm, err := l.Lock(ctx, auditKey("audit48-many-warm"))
	if err != nil {
		t.Fatal(err)
	}
	warm.Unlock(ctx)

	for i := 0; i < 50; i++ {
		px.holdAll()
		d := time.Duration(10+i%7*15) * time.Millisecond
		cctx, cancel := context.WithTimeout(ctx, d)
		start := time.Now()
		ll, err := l.Lock(cctx, key)
		cancel()
		if err == nil {
			ll.Unlock(ctx)
			t.Fatalf("Lock %d: granted a held key", i)
		}
		if !errors.Is(err, lock.ErrNotAcquired) {
			t.Errorf("Lock %d: %v, want ErrNotAcquired", i, err)
		}
		if took := time.Since(start); took > d+2*time.Second {
			t.Errorf("Lock %d returned %v after its deadline", i, took-d)
		}
	}

	// What the cancelled calls sent stays held (their connections' drains
	// would last 15 s); the connections made from now on pass. The
	// clean-ups (Leaves) a hold caught give up after ReleaseTimeout and
	// go again on new connections: wait for that first, well within the
	// drains.
	// The bound tells a slot freed at once from one that waits for a
	// drain: with the sockets left to pgx's drains (dropIfEnded's close
	// and closeDrained removed) this Lock waited 6.8 s for a slot; with
	// them, 4 ms on a quiet machine and over 3 s on a loaded one, behind
	// the clean-ups queued on the pool of 2, each on a new connection.
	time.Sleep(lock.DefaultReleaseTimeout + 500*time.Millisecond)
	lctx, lcancel := context.WithTimeout(ctx, 5*time.Second)
	defer lcancel()
	start := time.Now()
	other, err := l.Lock(lctx, auditKey("audit48-many-other"))
	if err != nil {
		t.Fatalf("a Lock of another key on new connections after 50 cancelled Locks: %v after %v", err, time.Since(start))
	}
	t.Logf("the Lock of another key took %v; %d bytes held", time.Since(start), px.heldBytes())
	other.Unlock(ctx)

	px.deliver()
	time.Sleep(300 * time.Millisecond)
	if err := lh.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	waitFor(t, "the cancelled Locks' entries to go", 10*time.Second, func() bool { return len(entriesOf(t, raw, "dlock", key)) == 0 })
	lc, err := holder.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("the key is free (its holder unlocked, its waiters gave up), yet TryLock: %v", err)
	}
	lc.Unlock(ctx)
}

// TestAudit48CancelledFirstCallFreesSlot: a Locker's first call reads the
// schema's version; when its context ends while the network holds that
// query, the pool's slot stayed taken for pgx's 15 s drain, and the next
// call on a one-connection pool waited for it.
func TestAudit48CancelledFirstCallFreesSlot(t *testing.T) {
	url := serverURL(t)
	ctx := context.Background()
	px := newPGProxy(t, serverAddr(t, url))
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(px.addr())
	pn, _ := strconv.Atoi(port)
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, uint16(pn)
	cfg.ConnConfig.Fallbacks = nil
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := pool.Ping(ctx); err != nil { // the pool's connection, open before the hold
		t.Fatal(err)
	}
	d, lo := newDriver(pool, &Options{}, true)
	l := lock.New(d, lo)
	t.Cleanup(func() { l.Close() })

	px.holdAll()
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = l.Lock(cctx, auditKey("audit48-first"))
	cancel()
	if err == nil {
		t.Fatal("a Lock through a held network was granted")
	}
	lctx, lcancel := context.WithTimeout(ctx, 3*time.Second)
	defer lcancel()
	start := time.Now()
	ls, err := l.Lock(lctx, auditKey("audit48-first-next"))
	if err != nil {
		t.Fatalf("a Lock on a healthy path after a cancelled first call: %v after %v", err, time.Since(start))
	}
	ls.Unlock(ctx)
	px.deliver()
}

// TestAudit48CancelledPingFreesSlot: the pool pings a connection idle for
// more than a second before handing it out; a Lock whose context ends
// while the network holds that ping leaves the connection to pgx's 15 s
// drain, its pool slot taken until then.
func TestAudit48CancelledPingFreesSlot(t *testing.T) {
	url := serverURL(t)
	ctx := context.Background()
	px := newPGProxy(t, serverAddr(t, url))
	l := openProxied(t, url, px, 1)
	warm, err := l.Lock(ctx, auditKey("audit48-ping-warm"))
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1200 * time.Millisecond) // idle long enough to be pinged

	px.holdAll()
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	start := time.Now()
	_, err = l.Lock(cctx, auditKey("audit48-ping"))
	cancel()
	if err == nil {
		t.Fatal("a Lock through a held network was granted")
	}
	t.Logf("the cancelled Lock returned after %v: %v", time.Since(start), err)
	lctx, lcancel := context.WithTimeout(ctx, 3*time.Second)
	defer lcancel()
	start = time.Now()
	ls, err := l.Lock(lctx, auditKey("audit48-ping-next"))
	if err != nil {
		t.Fatalf("a Lock on a healthy path after a Lock cancelled in the pool's ping: %v after %v", err, time.Since(start))
	}
	ls.Unlock(ctx)
	px.deliver()
}

// TestAudit48URLSpaces: Open takes the URL's query apart with net/url and
// hands pgx the rest re-encoded, a space as "+". pgx before v5.11 read "+"
// in a query value as a space; v5.11 and later read it as a plus sign
// (libpq's rule), so a value with a space (%20 in the URL: a path, an
// options string, an application name) reached the server with "+"
// instead.
func TestAudit48URLSpaces(t *testing.T) {
	ctx := context.Background()
	base := serverURL(t)
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	for _, c := range []struct{ param, setting, want string }{
		{"application_name=dlock%20audit%2048", "application_name", "dlock audit 48"},
		{"options=-c%20lock_timeout%3D4321", "lock_timeout", "4321ms"},
		{"application_name=a%2Bb", "application_name", "a+b"},
	} {
		l, err := lock.Open(ctx, base+sep+c.param)
		if err != nil {
			t.Errorf("%s: Open: %v", c.param, err)
			continue
		}
		var pool *pgxpool.Pool
		if !l.As(&pool) {
			t.Fatal("As(**pgxpool.Pool) refused")
		}
		var got string
		err = pool.QueryRow(ctx, "SELECT current_setting($1)", c.setting).Scan(&got)
		l.Close()
		if err != nil {
			t.Errorf("%s: %v", c.param, err)
			continue
		}
		if got != c.want {
			t.Errorf("%s: the server's %s is %q, want %q", c.param, c.setting, got, c.want)
		}
	}
}

// TestAudit48PgBouncerCancelled: through PgBouncer in transaction mode,
// Locks of a held key cancelled at random points (the hard close of a
// cancelled step's socket lands inside a PgBouncer transaction) leave
// nothing behind: a Lock of another key succeeds promptly, and once the
// holder unlocks, the key has no entries and another client takes it.
func TestAudit48PgBouncerCancelled(t *testing.T) {
	pg := testserver.SharedPostgres(t)
	b := testserver.StartPgBouncer(t, pg, "transaction")
	ctx := context.Background()
	raw := rawPool(t, pg.URL())
	holder := newTestLocker(t, pg.URL(), nil, &netCut{})
	u := b.URL()
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	l, err := lock.Open(ctx, u+sep+"pooling=transaction&pool_max_conns=2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	key := auditKey("audit48-pgb")
	lh, err := holder.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 60; i++ {
		d := time.Duration(1+mrand.IntN(40)) * time.Millisecond
		cctx, cancel := context.WithTimeout(ctx, d)
		start := time.Now()
		ll, err := l.Lock(cctx, key)
		cancel()
		if err == nil {
			ll.Unlock(ctx)
			t.Fatalf("Lock %d: granted a held key", i)
		}
		if took := time.Since(start); took > d+time.Second {
			t.Errorf("Lock %d (%v) returned %v after its deadline", i, d, took-d)
		}
	}
	lctx, lcancel := context.WithTimeout(ctx, 3*time.Second)
	defer lcancel()
	other, err := l.Lock(lctx, auditKey("audit48-pgb-other"))
	if err != nil {
		t.Fatalf("a Lock of another key after 60 cancelled Locks: %v", err)
	}
	other.Unlock(ctx)
	if err := lh.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the cancelled Locks' entries to go", 10*time.Second, func() bool { return len(entriesOf(t, raw, "dlock", key)) == 0 })
	lc, err := holder.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("the key is free, yet TryLock: %v", err)
	}
	lc.Unlock(ctx)
}

// TestAudit48CancelledUnlockHeld: an Unlock whose step the network holds
// returns when its context ends; the pool's only slot comes back at once
// (the next Lock on new connections succeeds), the release is finished
// in the background, and the held step, reaching the server after
// another client took the key, leaves that client's grant alone.
func TestAudit48CancelledUnlockHeld(t *testing.T) {
	url := serverURL(t)
	raw := rawPool(t, url)
	ctx := context.Background()
	px := newPGProxy(t, serverAddr(t, url))
	l := proxiedLocker(t, url, px, 1, nil)
	other := newTestLocker(t, url, nil, &netCut{})
	key := auditKey("audit48-unlock")
	la, err := l.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	px.holdAll()
	uctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	start := time.Now()
	err = la.Unlock(uctx)
	cancel()
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("a cancelled Unlock returned after %v (%v)", took, err)
	}
	t.Logf("the cancelled Unlock: %v", err)
	lctx, lcancel := context.WithTimeout(ctx, 3*time.Second)
	defer lcancel()
	ln, err := l.Lock(lctx, auditKey("audit48-unlock-next"))
	if err != nil {
		t.Fatalf("a Lock on new connections after a cancelled Unlock: %v", err)
	}
	ln.Unlock(ctx)
	waitFor(t, "the background release", 10*time.Second, func() bool { return len(entriesOf(t, raw, "dlock", key)) == 0 })
	lo, err := other.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("the key was released, yet TryLock: %v", err)
	}
	defer lo.Unlock(ctx)
	px.deliver()
	time.Sleep(500 * time.Millisecond)
	if got := entriesOf(t, raw, "dlock", key); len(got) != 1 {
		t.Fatalf("after the held Unlock reached the server, the key's state is %q, want the other client's grant", got)
	}
	if err := lo.Refresh(ctx, 30*time.Second); err != nil {
		t.Fatalf("the other client's grant after the late Unlock: %v", err)
	}
}

// TestAudit48CancelledRefreshHeld: a Refresh whose step the network
// holds returns when its context ends; the lease's Unlock then goes
// through on new connections, and the held Refresh, reaching the server
// after the Unlock, does not bring the grant back.
func TestAudit48CancelledRefreshHeld(t *testing.T) {
	url := serverURL(t)
	raw := rawPool(t, url)
	ctx := context.Background()
	px := newPGProxy(t, serverAddr(t, url))
	l := proxiedLocker(t, url, px, 1, nil)
	key := auditKey("audit48-refresh")
	la, err := l.Lock(ctx, key, lock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	px.holdAll()
	rctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	start := time.Now()
	err = la.Refresh(rctx, time.Minute)
	cancel()
	if err == nil {
		t.Fatal("a Refresh through a held network succeeded")
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("a cancelled Refresh returned after %v (%v)", took, err)
	}
	uctx, ucancel := context.WithTimeout(ctx, 3*time.Second)
	defer ucancel()
	if err := la.Unlock(uctx); err != nil {
		t.Fatalf("Unlock on new connections after a cancelled Refresh: %v", err)
	}
	if got := entriesOf(t, raw, "dlock", key); len(got) != 0 {
		t.Fatalf("after Unlock: %q", got)
	}
	px.deliver()
	time.Sleep(500 * time.Millisecond)
	if got := entriesOf(t, raw, "dlock", key); len(got) != 0 {
		t.Fatalf("the held Refresh, reaching the server after the Unlock, left %q", got)
	}
}

// TestAudit48URLVariants: URLs users pass (sslmode variants, pool_*
// parameters, a host list whose first host refuses) still open and lock.
func TestAudit48URLVariants(t *testing.T) {
	ctx := context.Background()
	base := serverURL(t)
	u, err := neturl.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Del("sslmode")
	dead, err := net.Listen("tcp", "127.0.0.1:0") // a port that refuses once closed
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	for _, extra := range []string{
		"sslmode=disable", "sslmode=allow", "sslmode=prefer",
		"pool_max_conns=3&pool_min_conns=1&pool_max_conn_lifetime=1h&pool_max_conn_idle_time=5m&pool_health_check_period=1m",
		"pool_ping_timeout=2s&connect_timeout=5",
		"sslmode=disable&target_session_attrs=read-write",
		"HOSTS",
	} {
		v := *u
		qq := neturl.Values{}
		for k, vs := range q {
			qq[k] = vs
		}
		if extra == "HOSTS" {
			v.Host = deadAddr + "," + u.Host
			qq.Set("sslmode", "disable")
		} else {
			more, _ := neturl.ParseQuery(extra)
			for k, vs := range more {
				qq[k] = vs
			}
		}
		v.RawQuery = qq.Encode()
		l, err := lock.Open(ctx, v.String())
		if err != nil {
			t.Errorf("%s: Open: %v", extra, err)
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		ls, err := l.Lock(cctx, auditKey("audit48-url"))
		if err == nil {
			err = ls.Unlock(cctx)
		}
		cancel()
		l.Close()
		if err != nil {
			t.Errorf("%s: %v", extra, err)
		}
	}
}

// openProxied is a Locker Open makes (its pool of at most maxConns
// connections) reaching the server through p.
func openProxied(t testing.TB, url string, p *pgProxy, maxConns int) *lock.Locker {
	t.Helper()
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = p.addr()
	q := u.Query()
	q.Set("pool_max_conns", strconv.Itoa(maxConns))
	u.RawQuery = q.Encode()
	l, err := lock.Open(context.Background(), u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}
