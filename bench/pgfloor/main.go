// Command pgfloor is the Go side of the PostgreSQL floor measurements
// in docs/performance.md ("PostgreSQL floors"): run.sh beside it runs
// pgbench and this command, loop.sh the same statements inside the
// server, plain.sh prints the driver's plain statements.
//
//	pgfloor install URL DIR  installs dlock's schema (a Locker's first
//	                         Lock), grants and releases keys "0" to "32"
//	                         once, and writes DIR/dlock9.sql and
//	                         DIR/dlock9_hot.sql: pgbench scripts of the
//	                         plain Lock and Unlock statements of
//	                         DIR/plain.sql (checked against the driver's
//	                         last two statements in pg_stat_activity), $1
//	                         $2 $3 as pgbench variables.
//	pgfloor chain URL MODE N SECONDS
//	                         a FIFO hand-over chain of N connections on
//	                         one row, each LISTENing: the holder's release
//	                         commits with a NOTIFY to the next; MODE claim:
//	                         the woken waiter then commits its grant (an
//	                         UPDATE), handover: the release itself grants
//	                         the row to the next, whose wake-up is its
//	                         grant. Prints grants/s.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/driver/postgres"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: pgfloor install URL DIR | pgfloor chain URL claim|handover N SECONDS")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "install":
		err = install(os.Args[2], os.Args[3])
	case "chain":
		n, _ := strconv.Atoi(os.Args[4])
		secs, _ := strconv.Atoi(os.Args[5])
		err = chain(os.Args[2], os.Args[3], n, time.Duration(secs)*time.Second)
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgfloor:", err)
		os.Exit(1)
	}
}

func install(u, dir string) error {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		return err
	}
	cfg.MaxConns = 2
	cfg.ConnConfig.RuntimeParams["application_name"] = "pgfloor-dlock"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	mon, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	defer mon.Close(ctx)
	l := postgres.New(pool, nil)
	last := func() (string, error) {
		var q string
		err := mon.QueryRow(ctx, "SELECT query FROM pg_stat_activity WHERE application_name = 'pgfloor-dlock' AND query NOT LIKE 'LISTEN%'").Scan(&q)
		return q, err
	}
	var lockSQL, unlockSQL string
	for k := 32; k >= 0; k-- { // the first grant of each key runs lock3, which makes the row; the last ones are plain
		lease, err := l.Lock(ctx, strconv.Itoa(k))
		if err != nil {
			return err
		}
		if lockSQL, err = last(); err != nil {
			return err
		}
		if err := lease.Unlock(ctx); err != nil {
			return err
		}
		if unlockSQL, err = last(); err != nil {
			return err
		}
	}
	// pg_stat_activity keeps the first track_activity_query_size bytes
	// (1024 by default) of a statement: the full texts are plainSteps'
	// (in DIR/plain.sql, one a line, printed by run.sh from fast.go), which
	// must begin as the driver's last two statements did.
	b, err := os.ReadFile(filepath.Join(dir, "plain.sql"))
	if err != nil {
		return err
	}
	texts := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(texts) != 2 || !strings.HasPrefix(texts[0], lockSQL) || !strings.HasPrefix(texts[1], unlockSQL) || len(unlockSQL) < 500 {
		return fmt.Errorf("the driver's last steps were not plainSteps':\n%s\n%s", lockSQL, unlockSQL)
	}
	lockSQL, unlockSQL = texts[0], texts[1]
	// pgbench -M prepared prepares without parameter types; the casts
	// give the types the driver's Prepare names (text, text, int8).
	vars := strings.NewReplacer("$1", ":key::pg_catalog.text", "$2", ":owner::pg_catalog.text", "$3", ":ttl::pg_catalog.int8")
	lockB, unlockB := vars.Replace(lockSQL), vars.Replace(unlockSQL)
	head := "\\set key :client_id + 1\n\\set owner :client_id + 1000\n\\set ttl 30000000\n"
	many := head + lockB + ";\n" + unlockB + ";\n"
	// The hot key: the same statements on key 0, lock9 wrapped so that
	// \gset sees a row when it changed none (a try, as the advisory loop's).
	hotVars := strings.NewReplacer(":key::", "'0'::")
	hotLock := strings.Replace(hotVars.Replace(lockB), ") UPDATE ", "), u AS (UPDATE ", 1) + ") SELECT count(*) AS got FROM u \\gset\n"
	hot := "\\set owner :client_id + 1000\n\\set ttl 30000000\n" + hotLock +
		"\\if :got\n" + hotVars.Replace(unlockB) + ";\n\\else\n\\sleep 1 ms\n\\endif\n"
	if err := os.WriteFile(filepath.Join(dir, "dlock9.sql"), []byte(many), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "dlock9_hot.sql"), []byte(hot), 0o644)
}

func chain(u, mode string, n int, d time.Duration) error {
	ctx := context.Background()
	setup, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	defer setup.Close(ctx)
	if _, err := setup.Exec(ctx, "DROP TABLE IF EXISTS pgfloor_chain; CREATE TABLE pgfloor_chain (key text PRIMARY KEY, h text) WITH (fillfactor = 50); INSERT INTO pgfloor_chain VALUES ('0', '0')"); err != nil {
		return err
	}
	conns := make([]*pgx.Conn, n)
	for i := range conns {
		if conns[i], err = pgx.Connect(ctx, u); err != nil {
			return err
		}
		defer conns[i].Close(ctx)
		if _, err := conns[i].Exec(ctx, "LISTEN pgfloor_"+strconv.Itoa(i)); err != nil {
			return err
		}
	}
	var grants atomic.Int64
	stop := time.Now().Add(d)
	done := make(chan error, n)
	for i := range conns {
		go func(i int) {
			c, me, next := conns[i], strconv.Itoa(i), strconv.Itoa((i+1)%n)
			for first := i == 0; ; first = false {
				if !first {
					if _, err := c.WaitForNotification(ctx); err != nil {
						done <- err
						return
					}
				}
				if mode == "claim" && !first {
					t, err := c.Exec(ctx, "UPDATE pgfloor_chain SET h = $1 WHERE key = '0' AND h IS NULL", me)
					if err == nil && t.RowsAffected() != 1 {
						err = fmt.Errorf("claim by %s changed %d rows", me, t.RowsAffected())
					}
					if err != nil {
						done <- err
						return
					}
				}
				grants.Add(1)
				if time.Now().After(stop) {
					done <- nil
					return
				}
				h := "NULL"
				if mode == "handover" {
					h = "'" + next + "'"
				}
				// One round trip: the release and the NOTIFY commit together.
				t, err := c.Exec(ctx, "BEGIN; UPDATE pgfloor_chain SET h = "+h+" WHERE key = '0' AND h = '"+me+"'; NOTIFY pgfloor_"+next+"; COMMIT")
				if err == nil && t.String() != "COMMIT" {
					err = fmt.Errorf("release by %s: %s", me, t)
				}
				if err != nil {
					done <- err
					return
				}
			}
		}(i)
	}
	start := time.Now()
	if err := <-done; err != nil {
		return err
	}
	el := time.Since(start)
	fmt.Printf("chain %s n=%d: %d grants in %.1fs: %.0f grants/s, %.0f µs a grant\n", mode, n, grants.Load(), el.Seconds(), float64(grants.Load())/el.Seconds(), el.Seconds()*1e6/float64(grants.Load()))
	os.Exit(0) // the other workers wait for notifications that will not come
	return nil
}
