package testserver

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// pgQuery runs sql on p's primary and fails the test on error.
func pgQuery(t *testing.T, p *Postgres, sql string) string {
	t.Helper()
	out, err := p.Exec(sql)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// psqlAt runs sql with this machine's psql against url (any server, any
// role), bounded by timeout.
func psqlAt(url, sql string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return hostPsql("")(ctx, 0, url, sql)
}

// pgAnswers probes addr as the readiness check does, bounded by timeout.
func pgAnswers(addr string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return pgStartup("postgres", "postgres", nil)(ctx, addr)
}

func TestPostgres(t *testing.T) {
	t.Parallel()
	p := StartPostgres(t, nil)
	p.RequireFaults(t)
	if got := pgQuery(t, p, "SHOW max_connections; SHOW fsync; SELECT current_user, current_database();"); got != "200\noff\npostgres|postgres" {
		t.Fatalf("settings and identity: got %q", got)
	}
	if !strings.HasPrefix(p.URL(), "postgres://postgres:") || !strings.HasSuffix(p.URL(), "@"+p.Addr()+"/postgres?sslmode=disable") {
		t.Fatalf("URL %q", p.URL())
	}
	pgQuery(t, p, "CREATE TABLE kept (k text PRIMARY KEY, v int); INSERT INTO kept VALUES ('a', 1);")

	// A role with a password and no rights logs in over TCP, and is refused
	// what it was not granted.
	url, err := p.CreateUser("limited", "s3cret'x")
	must(t, err)
	if out, err := psqlAt(url, "SELECT current_user, rolsuper FROM pg_roles WHERE rolname = current_user;", 10*time.Second); err != nil || out != "limited|f" {
		t.Fatalf("as limited: %q, %v", out, err)
	}
	if _, err := psqlAt(url, "SELECT v FROM kept;", 10*time.Second); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("limited reads an ungranted table: got %v, want permission denied", err)
	}
	if _, err := psqlAt(p.URLFor("limited", "wrong"), "SELECT 1;", 10*time.Second); err == nil || !strings.Contains(err.Error(), "password authentication failed") {
		t.Fatalf("wrong password: got %v, want password authentication failed", err)
	}
	pgQuery(t, p, "GRANT SELECT ON kept TO limited;")
	if out, err := psqlAt(url, "SELECT v FROM kept;", 10*time.Second); err != nil || out != "1" {
		t.Fatalf("limited reads a granted table: %q, %v", out, err)
	}

	// Pause: connections are accepted, nothing answers; an open session
	// (a backend, in a session of its own) is frozen too.
	must(t, p.Pause())
	if err := pgAnswers(p.Addr(), 500*time.Millisecond); !isTimeout(err) {
		t.Fatalf("startup while paused: got %v, want a timeout", err)
	}
	must(t, p.Resume())
	if got := pgQuery(t, p, "SELECT v FROM kept;"); got != "1" {
		t.Fatalf("after resume: %q", got)
	}

	// Kill: every process is gone (connections refused, no backend
	// left), and Restart recovers the committed data on the same port.
	must(t, p.Kill())
	requireRefused(t, p.Addr())
	requireNoneLeft(t, p, "Kill")
	must(t, p.Restart())
	if got := pgQuery(t, p, "SELECT v FROM kept;"); got != "1" {
		t.Fatalf("after kill and restart: %q", got)
	}

	must(t, p.Stop())
	requireRefused(t, p.Addr())
	requireNoneLeft(t, p, "Stop")
	must(t, p.Restart())
	if got := pgQuery(t, p, "SELECT v FROM kept;"); got != "1" {
		t.Fatalf("after stop and restart: %q", got)
	}
}

// TestPostgresPauseFreezesSessions checks that Pause reaches the backends
// serving open connections, which PostgreSQL puts in sessions of their own,
// outside the postmaster's process group.
// requireNoneLeft checks that no process of a local server is left in its
// data directory after hook (a container's are gone with it).
func requireNoneLeft(t *testing.T, p *Postgres, hook string) {
	t.Helper()
	if pr, ok := p.Nodes[0].node.(*process); ok {
		if left := processesIn(pr.dir); len(left) != 0 {
			t.Fatalf("processes left after %s: %v", hook, left)
		}
	}
}

func TestPostgresPauseFreezesSessions(t *testing.T) {
	t.Parallel()
	p := StartPostgres(t, nil)
	p.RequireFaults(t)
	// A backend that exists before the pause: a psql sleeping in a query.
	done := make(chan error, 1)
	go func() { _, err := p.Exec("SELECT pg_sleep(1);"); done <- err }()
	deadline := time.Now().Add(10 * time.Second)
	for pgQuery(t, p, "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep%' AND state = 'active';") != "1" {
		if time.Now().After(deadline) {
			t.Fatal("the sleeping session never showed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	must(t, p.Pause())
	// The sleep would end after 1s; frozen, it must not.
	select {
	case err := <-done:
		t.Fatalf("a session finished its query while the server was paused (%v)", err)
	case <-time.After(2 * time.Second):
	}
	if pr, ok := p.Nodes[0].node.(*process); ok {
		if n := len(processesIn(pr.dir)); n < 2 {
			t.Fatalf("%d processes in the data directory, want the postmaster and its children", n)
		}
	}
	must(t, p.Resume())
	select {
	case err := <-done:
		must(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the session did not finish after Resume")
	}
}

func TestSharedPostgres(t *testing.T) {
	t.Parallel()
	p := SharedPostgres(t)
	if got := pgQuery(t, p, "SELECT 1;"); got != "1" {
		t.Fatalf("SELECT 1: %q", got)
	}
	if err := p.Kill(); !errors.Is(err, ErrNoFaults) {
		t.Fatalf("Kill on shared instance: got %v, want ErrNoFaults", err)
	}
}

func TestPostgresReplica(t *testing.T) {
	t.Parallel()
	p := StartPostgres(t, &PostgresOptions{Replica: true})
	p.RequireFaults(t)
	if len(p.Nodes) != 2 {
		t.Fatalf("%d nodes, want 2", len(p.Nodes))
	}
	if got, err := p.ExecNode(1, "SELECT pg_is_in_recovery();"); err != nil || got != "t" {
		t.Fatalf("replica in recovery: %q, %v", got, err)
	}
	// The standby accepts reads once it replayed the base backup; its WAL
	// receiver connects a moment later (over a second on a loaded machine).
	for deadline := time.Now().Add(10 * time.Second); ; {
		got := pgQuery(t, p, "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming';")
		if got == "1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("streaming replicas on the primary: %q", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	pgQuery(t, p, "CREATE TABLE t (v int); INSERT INTO t VALUES (7);")
	waitReplica(t, p, "SELECT v FROM t;", "7")
	if _, err := p.ExecNode(1, "INSERT INTO t VALUES (8);"); err == nil || !strings.Contains(err.Error(), "read-only transaction") {
		t.Fatalf("write on the standby: got %v, want a read-only error", err)
	}

	// The standby survives its own kill and streams again.
	must(t, p.Node(1).Kill())
	must(t, p.Node(1).Restart())
	pgQuery(t, p, "INSERT INTO t VALUES (9);")
	waitReplica(t, p, "SELECT sum(v) FROM t;", "16")

	// Failover: the primary dies, the standby is promoted and takes writes.
	must(t, p.Node(0).Kill())
	must(t, p.Promote())
	if got, err := p.ExecNode(1, "SELECT pg_is_in_recovery(); INSERT INTO t VALUES (10); SELECT sum(v) FROM t;"); err != nil || got != "f\n26" {
		t.Fatalf("promoted replica: %q, %v", got, err)
	}
	// Promoted, it stays a primary across its own restart.
	must(t, p.Node(1).Restart())
	if got, err := p.ExecNode(1, "SELECT pg_is_in_recovery(), sum(v) FROM t;"); err != nil || got != "f|26" {
		t.Fatalf("promoted replica after restart: %q, %v", got, err)
	}
}

func waitReplica(t *testing.T, p *Postgres, sql, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := p.ExecNode(1, sql)
		if err == nil && got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica: %s gave %q, %v; want %q", sql, got, err, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestPgBouncer(t *testing.T) {
	t.Parallel()
	if b := os.Getenv(EnvBackend); b != "" && b != "local" {
		t.Skipf("%s=%s: PgBouncer runs beside local servers only", EnvBackend, b)
	}
	p := StartPostgres(t, nil)
	b := StartPgBouncer(t, p, "transaction")
	if b.Addr() == p.Addr() {
		t.Fatalf("pgbouncer on the server's address %s", b.Addr())
	}
	if out, err := psqlAt(b.URL(), "SELECT current_user;", 10*time.Second); err != nil || out != "postgres" {
		t.Fatalf("superuser through pgbouncer: %q, %v", out, err)
	}
	// A role made after PgBouncer started logs in with its password
	// (auth_query), and a wrong password is refused.
	if _, err := p.CreateUser("bounced", "pw"); err != nil {
		t.Fatal(err)
	}
	if out, err := psqlAt(b.URLFor("bounced", "pw"), "SELECT current_user;", 10*time.Second); err != nil || out != "bounced" {
		t.Fatalf("role through pgbouncer: %q, %v", out, err)
	}
	if _, err := psqlAt(b.URLFor("bounced", "nope"), "SELECT 1;", 10*time.Second); err == nil {
		t.Fatal("a wrong password passed pgbouncer")
	}
	// The admin console (database pgbouncer) says it pools by transaction.
	show, err := psqlAt(strings.Replace(b.URL(), "/postgres?", "/pgbouncer?", 1), "SHOW CONFIG;", 10*time.Second)
	must(t, err)
	if !strings.Contains(show, "pool_mode|transaction|") {
		t.Fatalf("pgbouncer's config has no pool_mode transaction:\n%s", show)
	}
	b.RequireFaults(t)
	must(t, b.Kill())
	requireRefused(t, b.Addr())
	must(t, b.Restart())
	if out, err := psqlAt(b.URL(), "SELECT 1;", 10*time.Second); err != nil || out != "1" {
		t.Fatalf("after pgbouncer restart: %q, %v", out, err)
	}
}

// TestPostgresExternal runs StartPostgres with DLOCK_POSTGRES_URL naming a
// server (one the harness started, standing for one it does not control).
// Not parallel: it sets the variable.
func TestPostgresExternal(t *testing.T) {
	if os.Getenv(EnvBackend) != "" {
		t.Skipf("%s is set: the address variables are ignored", EnvBackend)
	}
	own := StartPostgres(t, nil)
	t.Setenv(EnvPostgresURL, own.URL())
	p := StartPostgres(t, nil)
	if p.URL() != own.URL() || p.Addr() != own.Addr() {
		t.Fatalf("external URL %q at %s, want %q at %s", p.URL(), p.Addr(), own.URL(), own.Addr())
	}
	if ok, _ := p.Node(0).Faults(); ok {
		t.Fatal("fault hooks available on a server from the environment")
	}
	if err := p.Kill(); !errors.Is(err, ErrNoFaults) {
		t.Fatalf("Kill: got %v, want ErrNoFaults", err)
	}
	url, err := p.CreateUser("ext_user", "pw")
	must(t, err)
	if out, err := psqlAt(url, "SELECT current_user;", 10*time.Second); err != nil || out != "ext_user" {
		t.Fatalf("role on the external server: %q, %v", out, err)
	}
	t.Run("replica", func(t *testing.T) {
		StartPostgres(t, &PostgresOptions{Replica: true})
		t.Fatal("StartPostgres with a Replica on an external server did not skip")
	})
	t.Run("pgbouncer", func(t *testing.T) {
		StartPgBouncer(t, p, "session")
		t.Fatal("StartPgBouncer in front of an external server did not skip")
	})
}
