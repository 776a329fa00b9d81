package main

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver/postgres"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PostgreSQL: dlock's driver/postgres (one SQL function call per step),
// and, as a second baseline, the plain session-level advisory lock most Go
// code takes: pg_try_advisory_lock in a loop, pg_advisory_unlock, on one
// connection per worker. It has no TTL, no fencing and no queue (a
// session that stalls keeps it; its connection's end drops it), so it is
// the floor of a lock on PostgreSQL rather than a peer. The round-trip
// baseline is SELECT 1.
//
// cirello.io/pglock, the Go peer on PostgreSQL, is not measured: the Go
// module proxy reachable where the bench is run refuses it (403), so its
// rows say so (see unmeasured).

// advisoryRetry is the plain loop's delay between tries, as the peers'
// "(1ms)" configurations.
const advisoryRetry = time.Millisecond

func openDlockPostgres(ctx context.Context, u string) (client, error) {
	pool, err := dialPostgresPool(ctx, u)
	if err != nil {
		return nil, err
	}
	return &dlockClient{l: postgres.New(pool, nil), close: func() error { pool.Close(); return nil }}, nil
}

// dialPostgresPool makes a pool with pgx's defaults and checks it
// connects.
func dialPostgresPool(ctx context.Context, u string) (*pgxpool.Pool, error) {
	pool, err := pgxpool.New(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("postgres %s: %w", redactPostgres(u), err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres %s: %w", redactPostgres(u), err)
	}
	return pool, nil
}

func dialPostgres(ctx context.Context, u string) (*pgx.Conn, error) {
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("postgres %s: %w", redactPostgres(u), err)
	}
	return conn, nil
}

// redactPostgres returns the host and port of a postgres URL: the URL
// holds the password.
func redactPostgres(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "postgres"
	}
	return u.Host
}

// --- the plain advisory lock ---

// advisoryClient is one worker's connection. A pgx.Conn runs one
// statement at a time; the mutex keeps concurrent calls safe (the bench
// gives each worker its own client).
type advisoryClient struct {
	mu   sync.Mutex
	conn *pgx.Conn
}

type advisoryHeld struct {
	c  *advisoryClient
	id int64
}

func openAdvisory(ctx context.Context, u string) (client, error) {
	conn, err := dialPostgres(ctx, u)
	if err != nil {
		return nil, err
	}
	return &advisoryClient{conn: conn}, nil
}

// advisoryID is the key's 64-bit FNV-1a hash, as Go code hashes a name
// into the advisory lock's bigint.
func advisoryID(key string) int64 {
	h := fnv.New64a()
	h.Write([]byte(key))
	return int64(h.Sum64())
}

func (c *advisoryClient) query(ctx context.Context, sql string, id int64) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ok bool
	err := c.conn.QueryRow(ctx, sql, id).Scan(&ok)
	return ok, err
}

// Lock tries pg_try_advisory_lock every advisoryRetry until it is granted
// or ctx ends. A try is not cancelled with ctx: pgx closes a connection
// whose query is cancelled, and the worker would have none left; ctx is
// checked between tries, and a lock granted after ctx ended is released.
func (c *advisoryClient) Lock(ctx context.Context, key string) (held, error) {
	id := advisoryID(key)
	for {
		ok, err := c.query(context.WithoutCancel(ctx), "SELECT pg_try_advisory_lock($1)", id)
		if err != nil {
			return nil, err
		}
		if ok {
			h := &advisoryHeld{c: c, id: id}
			if err := ctx.Err(); err != nil {
				return nil, errors.Join(err, h.Unlock(context.WithoutCancel(ctx)))
			}
			return h, nil
		}
		t := time.NewTimer(advisoryRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

func (h *advisoryHeld) Unlock(ctx context.Context) error {
	ok, err := h.c.query(ctx, "SELECT pg_advisory_unlock($1)", h.id)
	if err == nil && !ok {
		err = errors.New("pg_advisory_unlock: not held")
	}
	return err
}

func (c *advisoryClient) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return c.conn.Close(ctx)
}

// --- the probe: SELECT 1 ---

type postgresProbe struct{ conn *pgx.Conn }

// roundTrip runs SELECT 1 as the drivers run their statements (pgx's
// default: the extended protocol with a cached prepared statement), one
// round trip.
func (p postgresProbe) roundTrip(ctx context.Context) error {
	var n int
	return p.conn.QueryRow(ctx, "SELECT 1").Scan(&n)
}

func (p postgresProbe) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return p.conn.Close(ctx)
}

func postgresVersion(ctx context.Context, u string) string {
	conn, err := dialPostgres(ctx, u)
	if err != nil {
		return "?"
	}
	defer conn.Close(ctx)
	var v string
	if err := conn.QueryRow(ctx, "SHOW server_version").Scan(&v); err != nil {
		return "?"
	}
	v, _, _ = strings.Cut(v, " ")
	return v
}

// --- server CPU ---

// PostgreSQL runs a process per connection, forked by the postmaster,
// beside its background processes (checkpointer, WAL writer, autovacuum;
// the autovacuum workers come and go). The server's CPU is the sum, read
// from /proc: the postmaster's own time and the time of the children it
// has reaped (cutime, cstime: clock ticks), and the time each live child
// has run (schedstat: nanoseconds). It is known only when the server runs
// on this host, in this PID namespace: the bench finds the postmaster as
// the parent of its own connection's backend, and checks that the process
// is that backend by its title, which names the connection's client port.

// postmasterPID returns the PID of the postmaster serving u, or an error
// saying why it cannot be read here.
func postmasterPID(ctx context.Context, u string) (int, error) {
	conn, err := dialPostgres(ctx, u)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	var backend int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		return 0, err
	}
	local, ok := conn.PgConn().Conn().LocalAddr().(*net.TCPAddr)
	if !ok {
		return 0, errors.New("not a TCP connection")
	}
	title, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", backend))
	if err != nil {
		return 0, fmt.Errorf("backend %d is not a process of this host: %w", backend, err)
	}
	// "postgres: user db 127.0.0.1(port) idle"
	if !strings.Contains(string(title), "("+strconv.Itoa(local.Port)+")") {
		return 0, fmt.Errorf("process %d is not this connection's backend (%q)", backend, title)
	}
	st, err := readStat(backend)
	if err != nil {
		return 0, err
	}
	return st.ppid, nil
}

// procStat is what the bench reads of /proc/PID/stat.
type procStat struct {
	ppid                         int
	utime, stime, cutime, cstime int64 // clock ticks
}

func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	// The command name, in parentheses, may hold spaces: the fields
	// that count follow the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): field n is f[n-3].
	if len(f) < 15 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	num := func(n int) int64 { v, _ := strconv.ParseInt(f[n-3], 10, 64); return v }
	return procStat{ppid: int(num(4)), utime: num(14), stime: num(15), cutime: num(16), cstime: num(17)}, nil
}

// runTime is a live process's CPU time so far (schedstat's first field),
// in nanoseconds.
func runTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("/proc/%d/schedstat: empty", pid)
	}
	ns, err := strconv.ParseInt(f[0], 10, 64)
	return time.Duration(ns), err
}

// clockTick is USER_HZ, the unit of /proc's utime and cutime: 100 on
// Linux on every architecture Go supports.
const clockTick = 10 * time.Millisecond

// postgresUsage sums the CPU time of the postmaster and its children.
func postgresUsage(postmaster int) (serverUsage, bool) {
	st, err := readStat(postmaster)
	if err != nil {
		return serverUsage{}, false
	}
	own, err := runTime(postmaster)
	if err != nil {
		return serverUsage{}, false
	}
	total := own + time.Duration(st.cutime+st.cstime)*clockTick
	dir, err := os.ReadDir("/proc")
	if err != nil {
		return serverUsage{}, false
	}
	for _, e := range dir {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == postmaster {
			continue
		}
		cs, err := readStat(pid)
		if err != nil || cs.ppid != postmaster {
			continue // gone, or another's
		}
		rt, err := runTime(pid)
		if err != nil {
			continue // exited meanwhile: its time moves to cutime
		}
		total += rt
	}
	return serverUsage{cpu: total}, true
}
