package nemesis

import (
	"time"

	"github.com/dlock-go/dlock/harness/chaos"
)

// The targets of the backends' environments: what the servers' own
// faults do not vary. Each is Long (make nemesis), and says in its
// summary what its environment was, and when it changed.
//
//   - postgres-isolation: the postgres target on a database whose default
//     isolation level (ALTER DATABASE ... SET default_transaction_isolation)
//     is read committed, repeatable read, then serializable, a third of the
//     run each: one target, not three, to keep make nemesis's run short;
//     at each change the driver's sessions are ended, so that every
//     connection of every Locker runs under each level for a third of the
//     run (a session keeps the default it started with).
//   - postgres-pgbouncer: the driver through PgBouncer in transaction mode
//     (pooling=transaction), PgBouncer killed and restarted as a fault
//     (down up to a second); no notification reaches a waiter through it,
//     so the target has no pub/sub adversary.
//   - etcd-member: a three-member cluster, every Locker given every
//     member (a proxy to each), one follower at a time frozen, cut off
//     from the clients or slowed, while the other two keep the quorum:
//     no server fault, so liveness is judged all along.
//
// PgBouncer's restarts and the member faults each run with a witness
// (witness.go): a holder must keep its lease across them and a waiter
// must be granted once the holder releases. The two PostgreSQL targets
// skip the check of keys used once (once.go), which waits over a minute
// for the driver's sweep: the postgres target makes it for the same
// driver on the same server.
func init() {
	targets = append(targets,
		&Target{
			Name: "postgres-isolation", Reentry: true, Resume: true, Notify: true, AllFaults: true, Backend: chaos.PostgresBackend, Shared: true, Permits: true, TTL: time.Second, Long: true,
			LockTTLs: ms(500*time.Millisecond, time.Second, 2*time.Second, 3*time.Second), RefreshTTLs: ms(300*time.Millisecond, 600*time.Millisecond, time.Second, 2*time.Second, 4*time.Second),
			Bound: 4 * time.Second, Recovery: 3 * time.Second, ReleaseTimeout: time.Second,
			url: pgURL(""), classify: classifyPG, isolation: true, skipOnce: true,
		},
		&Target{
			Name: "postgres-pgbouncer", Reentry: true, Resume: true, AllFaults: true, Backend: chaos.PostgresBackend, Shared: true, Permits: true, TTL: time.Second, Long: true,
			LockTTLs: ms(500*time.Millisecond, time.Second, 2*time.Second, 3*time.Second), RefreshTTLs: ms(300*time.Millisecond, 600*time.Millisecond, time.Second, 2*time.Second, 4*time.Second),
			Bound: 4 * time.Second, Recovery: 3 * time.Second, ReleaseTimeout: time.Second,
			url: pgURL("pooling=transaction"), classify: classifyPG, bouncer: true, skipOnce: true,
		},
		&Target{
			Name: "etcd-member", Reentry: true, Resume: true, Shared: true, Permits: true, AllFaults: true, Long: true,
			Backend: chaos.EtcdBackend, TTL: 2 * time.Second,
			LockTTLs: ms(time.Second, 2*time.Second, 3*time.Second), RefreshTTLs: ms(time.Second, 2*time.Second, 4*time.Second),
			Bound: 5 * time.Second, Recovery: 3 * time.Second, ReleaseTimeout: time.Second,
			Server: chaos.ServerOptions{EtcdCluster: true},
			url:    "etcd://%s/nemesis", classify: classifyEtcd, members: true,
		},
	)
}

// startEnv sets up the target's environment once its server is up.
func (r *run) startEnv() {
	switch {
	case r.tg.isolation:
		r.setIsolation(isolationLevels[0], false)
	case r.tg.bouncer:
		r.startBouncer()
	case r.tg.members:
		r.envProxies = r.proxies()
	}
}
