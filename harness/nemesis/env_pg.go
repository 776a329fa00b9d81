package nemesis

import (
	"fmt"
	"time"

	"github.com/dlock-go/dlock/harness/chaos"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
)

// The PostgreSQL environments: the database's default isolation level
// (ALTER DATABASE ... SET default_transaction_isolation), which every
// transaction of the driver's sessions runs under unless the driver sets
// its own, changed between phases of one run; and PgBouncer in
// transaction mode in front of the server, restarted as a fault.

// isolationLevels are the database defaults an isolation run goes
// through, an equal part of the run each.
var isolationLevels = []string{"read committed", "repeatable read", "serializable"}

// setIsolation makes level the database's default isolation level and
// ends the sessions of the driver's role (pg_terminate_backend), so that
// every Locker's connections start again under it: a session keeps the
// default it started with. Ending them is a server fault (liveness is
// not judged across it), and the run's summary says when each level
// began.
func (r *run) setIsolation(level string, terminate bool) {
	pg := r.srv.PG
	sql := fmt.Sprintf("ALTER DATABASE %s SET default_transaction_isolation = %s;",
		testserver.QuoteIdent(pg.Database), testserver.QuoteLiteral(level))
	if terminate {
		sql += fmt.Sprintf(" SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = %s AND usename = %s;",
			testserver.QuoteLiteral(pg.Database), testserver.QuoteLiteral(chaos.PostgresUser))
	}
	end := r.rec.FaultStart(Fault{Kind: "isolation", Target: level, Server: true})
	defer end()
	deadline := time.Now().Add(time.Minute) // a server fault may be under way
	for {
		_, err := pg.Exec(sql)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			r.problem("set the database's default isolation to %s: %v", level, err)
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	r.note("isolation %s from %v", level, r.sinceBegin())
}

// isolationPhases sets each level of isolationLevels but the first (set
// before the Lockers opened) in turn, at equal parts of the run from
// begin.
func (r *run) isolationPhases(begin time.Time, d time.Duration, stop <-chan struct{}) {
	for i, level := range isolationLevels[1:] {
		sleepOrStop(time.Until(begin.Add(d*time.Duration(i+1)/time.Duration(len(isolationLevels)))), stop)
		if closed(stop) {
			return
		}
		r.setIsolation(level, true)
	}
}

// startBouncer starts PgBouncer in transaction mode in front of the
// server: the Lockers' proxies and the prober connect to it, while the
// server's own faults (pause, kill) still act on PostgreSQL.
func (r *run) startBouncer() {
	r.bouncer = testserver.StartPgBouncer(r.t, r.srv.PG, "transaction")
	r.srv.Addrs = []string{r.bouncer.Addr()}
	r.note("through PgBouncer (transaction pooling) at %s", r.bouncer.Addr())
}

// bouncerRestart kills PgBouncer and starts it again after up to a
// second: every client connection and every server connection it pooled
// is cut. To the clients it is the server, so the prober's liveness is
// not judged across it (a new call may fail while it is down); but the
// server keeps every grant and every queued waiter, so a witness (see
// witness) holds a key and waits for it meanwhile: the holder must keep
// its lease, and the waiter must not fail.
func (n *nemesis) bouncerRestart() bool {
	if !n.serverBusy.CompareAndSwap(false, true) {
		return false
	}
	down := n.between(50*time.Millisecond, time.Second)
	n.spawn(func() {
		defer n.serverBusy.Store(false)
		b := n.r.bouncer
		n.r.witness(fmt.Sprintf("PgBouncer down %v", down.Round(time.Millisecond)), func() {
			end := n.r.rec.FaultStart(Fault{Kind: "bouncer-restart", Target: "down " + down.Round(time.Millisecond).String(), Server: true})
			defer end()
			at := n.r.sinceBegin()
			if err := b.Kill(); err != nil {
				n.r.problem("kill PgBouncer: %v", err)
			}
			n.sleep(down)
			n.r.retry("restart PgBouncer", b.Restart)
			n.r.note("PgBouncer restarted at %v, down %v", at, down.Round(time.Millisecond))
		})
	})
	return true
}
