package main

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
)

// serverOnThisHost reports whether the harness runs PostgreSQL as a
// process of this host (the local provider), where its CPU can be read.
func serverOnThisHost() bool {
	b := os.Getenv("DLOCK_TEST_BACKEND")
	return os.Getenv(testserver.EnvPostgresURL) == "" && (b == "" || b == "local")
}

// The server's CPU is read from the postmaster and its children: a query
// that burns CPU in its backend shows in it, and the client's own time
// does not.
func TestPostgresServerCPU(t *testing.T) {
	srv := testserver.SharedPostgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pm, err := postmasterPID(ctx, srv.URL())
	if err != nil {
		if !serverOnThisHost() {
			t.Skipf("the server is not a process of this host: %v", err)
		}
		t.Fatal(err)
	}
	conn, err := dialPostgres(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)

	u0, ok0 := postgresUsage(pm)
	c0 := clientCPU()
	var n int64
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM generate_series(1, 4000000)").Scan(&n); err != nil {
		t.Fatal(err)
	}
	c1 := clientCPU()
	u1, ok1 := postgresUsage(pm)
	if !ok0 || !ok1 {
		t.Fatalf("postgresUsage(%d): not read", pm)
	}
	server, client := u1.cpu-u0.cpu, c1-c0
	t.Logf("count(*) of 4M rows: server CPU %v, client CPU %v", server, client)
	if server < 100*time.Millisecond {
		t.Errorf("server CPU of a 4M-row count: %v; want at least 100ms", server)
	}
	if client > server/2 {
		t.Errorf("client CPU %v against server CPU %v: the client did the work?", client, server)
	}

	// A process that is not this connection's backend is refused.
	if _, err := postmasterPID(ctx, "postgres://127.0.0.1:1/x?connect_timeout=1"); err == nil {
		t.Error("postmasterPID of a server that is not there: no error")
	}
}

// The plain advisory lock excludes another worker on the same key, and
// lets it in after the release; its Unlock of a lock not held fails.
func TestAdvisoryLock(t *testing.T) {
	srv := testserver.SharedPostgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, err := openAdvisory(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := openAdvisory(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	key := "bench-test/advisory/" + t.Name()
	h, err := a.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = b.Lock(short, key)
	cancelShort()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second worker's Lock while held: %v; want a deadline", err)
	}
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	hb, err := b.Lock(ctx, key)
	if err != nil {
		t.Fatalf("second worker's Lock after the release: %v", err)
	}
	if err := hb.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := hb.Unlock(ctx); err == nil || !strings.Contains(err.Error(), "not held") {
		t.Errorf("second Unlock: %v; want not held", err)
	}
}

// A peer that cannot be built has rows that say why, in place of
// figures; it is never taken as the best peer, and the header names the
// server of a PostgreSQL URL without its password.
func TestUnmeasuredPeer(t *testing.T) {
	cfg := &config{addr: map[string]string{"postgres": "postgres://u:secret@127.0.0.1:5432/db"}, only: map[string]bool{}}
	for _, l := range cfg.libs("postgres") {
		if l.missing != "" || l.name == "pglock" {
			t.Errorf("libs returns %q, which cannot be measured", l.name)
		}
	}
	var tb table
	tb.add(&row{scenario: scenUncontended, backend: "postgres", lib: "postgres", kind: dlockRow,
		figs: []figure{{name: "median", value: 1e6, unit: duration, dir: lowerBetter}}})
	cfg.unmeasured(&tb, scenUncontended, "postgres", "median")
	r := tb.find(scenUncontended, "pglock")
	if r == nil {
		t.Fatal("no pglock row")
	}
	if f, _ := r.fig("median"); !strings.HasPrefix(f.na, "not measured: ") {
		t.Errorf("pglock median: na %q; want not measured: ...", f.na)
	}
	if _, who, ok := tb.bestPeer(scenUncontended, "postgres", "median", lowerBetter); ok {
		t.Errorf("best peer %q from a row without figures", who)
	}
	var out strings.Builder
	tb.write(&out)
	if !strings.Contains(out.String(), pglockMissing) {
		t.Errorf("table without the reason:\n%s", out.String())
	}
	cfg.only = map[string]bool{"postgres": true}
	var none table
	cfg.unmeasured(&none, scenUncontended, "postgres", "median")
	if len(none.rows) != 0 {
		t.Errorf("-libs postgres: %d unmeasured rows; want none", len(none.rows))
	}
	if a := serverAddr("postgres", cfg.addr["postgres"]); strings.Contains(a, "secret") || a != "127.0.0.1:5432" {
		t.Errorf("serverAddr: %q", a)
	}
}
