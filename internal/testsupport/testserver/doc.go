// Package testserver provides the real servers that dlock's driver and
// conformance tests run against: Redis (single server and a three-master
// Redis Cluster), memcached (one or more servers), ZooKeeper (standalone
// and a three-server ensemble) and PostgreSQL (one server, or a primary
// with a streaming replica; PgBouncer in front of it). There are no mocks: every server is a real
// process or a real container, and faults are injected with signals or the
// container engine's pause, kill and start.
//
// # Provisioning
//
// Each Start or Shared function finds a server in this order:
//
//  1. An address from the environment: DLOCK_REDIS_ADDR (host:port),
//     DLOCK_REDIS_CLUSTER_ADDRS, DLOCK_MEMCACHED_ADDR,
//     DLOCK_ZOOKEEPER_ADDR and DLOCK_ETCD_ADDR (comma-separated host:port
//     lists; etcd's are plain-http client addresses), and
//     DLOCK_POSTGRES_URL (a URL, postgres://user:password@host:port/db,
//     of a superuser). The harness
//     does not control such servers: their fault hooks return ErrNoFaults,
//     and RequireFaults skips the tests that need them.
//  2. The local binaries (redis-server and redis-cli, memcached, java with
//     ZooKeeper's jars, PostgreSQL's initdb, postgres, pg_basebackup and
//     psql, etcd: one member or a three-member cluster, with 100 ms
//     heartbeats and a 500 ms election timeout, so leases of one second
//     are granted as asked) started on free loopback ports, each in a fresh
//     directory under $TMPDIR/dlock-testserver-<pid>, and killed when the
//     test (or, for shared servers, the test binary) ends.
//  3. Containers (the "docker" provider, through the helper dlock-containers),
//     when a Docker engine answers and has or can pull the image; see
//     Containers below.
//  4. Otherwise the test fails with a message naming what to install, e.g.
//     "apt-get install redis-server", and why containers did not work.
//
// DLOCK_TEST_BACKEND=local or DLOCK_TEST_BACKEND=docker forces that provider
// (a forced provider that cannot run a server fails the test, never falls
// back) and ignores the address variables.
// DLOCK_ZOOKEEPER_CLASSPATH overrides the discovery of ZooKeeper's jars
// (ZOOKEEPER_HOME, /usr/share/zookeeper, Debian's /usr/share/java), and
// JAVA_HOME picks the JVM. DLOCK_POSTGRES_BINDIR names the directory of
// PostgreSQL's programs (default: postgres's on PATH, else Debian's
// /usr/lib/postgresql/<highest version>/bin).
//
// With -short, every Start and Shared function skips the test.
//
// # Providers
//
// A Provider starts servers of each Kind and returns them with working
// fault hooks (a Node per server, wrapped by NewServer). The built-in
// "local" provider runs processes, the built-in "docker" provider runs
// containers; RegisterProvider adds others, tried after these two.
//
// # Containers
//
// The docker provider starts one container per server from the images
// redis:7.0, memcached:1.6, zookeeper:3.8, postgres:15 and etcd:3.4 (no
// official image: make images builds it from Debian's etcd-server), or
// those named by DLOCK_REDIS_IMAGE, DLOCK_MEMCACHED_IMAGE,
// DLOCK_ZOOKEEPER_IMAGE, DLOCK_POSTGRES_IMAGE and DLOCK_ETCD_IMAGE
// (ContainerImage). A missing image is pulled; on a machine without a
// registry, `make images` builds images with these tags from the Debian
// packages installed there (docker/README-containers.md). Each server gets
// the same configuration as a local one, written into the container, and a
// command given in full, so official and Debian-built images start alike.
//
// Containers use host networking: a server listens on a free loopback port
// of the host, so Redis Cluster nodes and ZooKeeper peers announce
// addresses the tests reach, and Restart (docker start of the same
// container) keeps the address and the container's filesystem, hence the
// data. (Docker Desktop needs host networking enabled, version 4.34 or
// later.) The hooks: Pause and Resume are docker pause and unpause (the
// cgroup freezer: connections are accepted, nothing answers), Kill is
// docker kill and waits until the container exited, Restart is docker kill
// and docker start followed by the readiness probe, Stop is docker stop
// with a 5 second grace period. LogTail reads the container's output.
//
// This package does not talk to the Docker engine itself, so that the
// main module needs neither testcontainers-go nor the Docker client. A
// helper process does: dlock-containers, in the harness module
// (harness/cmd/dlock-containers, on harness/containers, which uses
// testcontainers-go). One helper serves a test binary, started on the
// first use of the docker provider; it serves the engine operations
// (create, start, state, pause, unpause, kill, stop, remove, logs, exec)
// over its standard input and output (net/rpc with the JSON codec; see
// package containerrpc). The readiness probes run here, as for local
// servers, and between probes the helper is asked whether the container
// has exited: a server that exits while starting fails with its exit code
// and log tail, and one that found its port taken is started again on
// other ports. The helper is the binary DLOCK_CONTAINERS_HELPER names
// (make test-docker builds bin/dlock-containers and sets it); otherwise
// testserver finds the repository above the working directory (the go.mod
// of module github.com/dlock-go/dlock with harness/go.mod beside it) and
// runs go build there, into the user cache directory (os.UserCacheDir,
// under dlock/). If the helper cannot be found, built or started, the
// provider is unavailable and says why.
//
// The helper finds the engine as testcontainers-go does (DOCKER_HOST, the
// Docker context, the default socket; it inherits the test binary's
// environment); the API version is negotiated (API 1.40, Docker 19.03, at
// least) or pinned with DOCKER_API_VERSION. testcontainers-go's reaper
// container (Ryuk) is switched off unless TESTCONTAINERS_RYUK_DISABLED is
// set, as it needs an image from a registry: containers are removed through
// the same cleanups as local processes. What those miss, the helper removes
// when its standard input ends: Main closes it after the shared servers'
// cleanups, and it ends too when the test binary exits or dies, even by
// SIGKILL; on Linux the helper also gets SIGTERM when the test binary dies
// (a parent-death signal) and does the same. Its containers carry its pid
// and host name as labels (org.dlock.testserver.pid and .host), so that if
// the helper itself was killed, the next helper to connect removes them.
// DLOCK_TESTSERVER_DEBUG=1 makes the helper log its operations and
// testcontainers-go's own lines to the test binary's standard error.
//
// # Shared and dedicated servers
//
// Starting servers is slow (a ZooKeeper ensemble takes seconds), so tests
// that only need a working server share one per test binary:
//
//	func TestMain(m *testing.M) { testserver.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		rdb := redis.NewClient(&redis.Options{Addr: testserver.SharedRedis(t).Addr()})
//		...
//	}
//
// A shared server starts on first use and is stopped by Main after the last
// test. Tests sharing it must use distinct keys and must not disturb it: its
// fault hooks return ErrNoFaults. Without Main, the Shared functions start a
// dedicated server per test instead.
//
// Tests that inject faults start their own, stopped by t.Cleanup:
//
//	srv := testserver.StartRedis(t, &testserver.RedisOptions{Persistence: true})
//	srv.RequireFaults(t) // skip if the server came from DLOCK_REDIS_ADDR
//	srv.Pause()          // SIGSTOP: requests time out
//	srv.Resume()         // SIGCONT
//	srv.Kill()           // SIGKILL: connections are refused
//	srv.Restart()        // same port, same data directory; returns once ready
//
// Groups (Memcached, RedisCluster, ZooKeeper, Postgres) apply a hook to
// all nodes; Node(i) addresses one, and ZooKeeper's Leader, WaitLeader and
// KillLeader find the ensemble's leader.
//
// # PostgreSQL
//
// StartPostgres and SharedPostgres return a *Postgres: URL gives a
// connection string for pgx or libpq
// (postgres://postgres:password@127.0.0.1:port/postgres?sslmode=disable)
// with the superuser's name and password (random per test binary); URLFor
// the same for another role. Exec runs SQL as the superuser with psql (the
// package stays on the standard library: no driver), and CreateUser makes
// a role that logs in with a password and has no other right, for the
// tests to grant what they need. Committed data survives Kill and Restart.
//
// The local provider runs initdb once per test binary into a template and
// gives each server a copy; the servers listen on 127.0.0.1 (Unix socket in
// their own directory), want SCRAM passwords over TCP, replication
// included, and run with fsync off and max_connections 200. As initdb,
// postgres and pgbouncer refuse to run as root, a test binary running as
// root runs them as the postgres user (Debian's postgresql package makes
// it; the directories under $TMPDIR are given to it, so $TMPDIR must let
// it in). PostgreSQL's children each start a session of their own, outside
// the postmaster's process group: the hooks find them by their working
// directory, the data directory (/proc), so that Pause freezes open
// sessions too and Kill returns once none is left. Stop is a fast shutdown
// (SIGINT).
//
// PostgresOptions.Replica adds a hot standby made with pg_basebackup -R:
// Node(0) is the primary, Node(1) the standby, streaming; Promote makes it
// a primary (pg_promote), e.g. after Node(0).Kill. NodeURL and ExecNode
// address one node.
//
// StartPgBouncer starts PgBouncer (Debian's /usr/sbin/pgbouncer) in front
// of a local Postgres's primary, in pool mode "transaction" or "session":
// every role with a password logs in through it (SCRAM, the secret looked
// up on the server by auth_query). It is skipped for a container or a
// server from DLOCK_POSTGRES_URL.
//
// # TLS
//
// RedisOptions.TLS, MemcachedOptions.TLS, ZooKeeperOptions.TLS and
// PostgresOptions.TLS start servers that accept TLS connections only, on
// their one client port (Redis: port 0 and tls-port; memcached: -Z;
// ZooKeeper: a secureClientPort with NettyServerCnxnFactory and PEM key
// and trust stores, and no plain port; PostgreSQL: ssl=on and a
// pg_hba.conf of hostssl lines, hostnossl rejected, clientcert=verify-ca
// with ClientAuth), with a CA, a server certificate (127.0.0.1,
// ::1, localhost) and a client certificate made with crypto/x509 at the
// start and removed with the server. TLSOptions.ClientAuth makes the
// server require the client certificate. The server's TLS field (a *TLS)
// gives the PEM files (CAFile, CertFile, KeyFile, and WrongCAFile, a CA
// that signed nothing) and ClientConfig. Both providers do it: a container
// gets the server's files in /dlock/tls. The harness's own probes
// (readiness, Leader) speak TLS to such servers. A test asking for TLS is
// skipped when the environment names the servers (DLOCK_*_ADDR,
// DLOCK_POSTGRES_URL): their TLS is not the harness's to set.
//
// # No leaks
//
// Each local server runs in its own process group, killed as a group at
// cleanup, even when the test failed or panicked. (Containers: see above.) On Linux every server
// also gets SIGKILL from the kernel when the test binary dies (Pdeathsig),
// so not even a killed or timed-out test binary leaves servers behind;
// leftover directories of dead test binaries are removed by the next one,
// which first kills any process still working in them (PostgreSQL's
// children, SIGSTOPped by a Pause as the binary died, do not see their
// postmaster die).
// Servers' logs go to a file in their directory; a failed start reports the
// log's tail, and so does the cleanup of a failed test.
//
// The package needs a Unix system; parent-death signals need Linux.
package testserver
