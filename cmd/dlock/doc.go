// Command dlock runs a command under a distributed lock, on any dlock
// backend: what flock(1), consul lock or etcdctl lock do for cron jobs and
// deploys that must not run twice, across machines. It also demonstrates
// the backends under contention.
//
//	dlock run [flags] KEY [--] COMMAND [ARGS...]
//	dlock elect [flags] NAME [--] COMMAND [ARGS...]
//	dlock demo [flags]
//	dlock inspect [flags] KEY
//	dlock schema [URL]
//	dlock help [run|elect|demo|inspect|schema]
//	dlock version
//
// # dlock run
//
// run takes the lock KEY on the backend named by -url (or $DLOCK_URL), runs
// COMMAND while holding it, renews the lease in the background, and
// releases it when COMMAND exits:
//
//	export DLOCK_URL=redisnx://localhost:6379
//	dlock run -n nightly-report ./report.sh              # skip if already running, like flock -n
//	dlock run -w 600 deploy/api make deploy               # queue behind another deploy, up to 10 minutes (flock -w)
//	dlock run -n 3 builds -- make build                   # at most 3 builds at once, the others queue (consul lock -n)
//
// Flags go before KEY. The first argument after them is KEY and the rest
// is the command; a -- between them is allowed, and needed when the
// command's first word starts with - (otherwise it is taken for a
// misplaced flag, a usage error). The command is run directly (not
// through a shell) with dlock's environment plus:
//
//	DLOCK_KEY     the key
//	DLOCK_TOKEN   the lease's fencing token, a decimal integer that strictly
//	              increases per key across grants: pass it to the resource
//	              the lock protects, which should refuse writes with a token
//	              smaller than one it has seen (see package lock)
//	DLOCK_LEASE   the lease's handle (lock.Lease.Handle): a program that
//	              opens a Locker on the same backend can Resume it, to
//	              watch and renew the lease itself (dlock still releases
//	              it when the command ends); keep it as secret as the lock
//	DLOCK_OWNER   the -owner, when one was given: a dlock run of the same
//	              KEY inside the command re-enters the lock
//	DLOCK_LIMIT   with -limit N (or -n N), N (and removed from the
//	              environment without, so that an outer run's does not
//	              mislead)
//
// Flags:
//
// Every DURATION is a Go duration (30s, 1m30s) or a plain number of
// seconds (30, 1.5), as flock -w takes it: -ttl 30 is -ttl 30s. A flag
// error gets one line saying what is wrong and a pointer to dlock run -h,
// on stderr (exit status 2); the help, asked for with dlock run -h or
// dlock help run, goes to stdout (exit status 0).
//
//	-url URL
//	    The backend (default $DLOCK_URL): redisnx://host:6379,
//	    rediswatch://host:6379, postgres://user:pw@host:5432/db,
//	    memcached://h1:11211,h2:11211,
//	    zookeeper://h1:2181,h2:2181/app/locks,
//	    etcd://h1:2379,h2:2379/app/locks, each with the query
//	    parameters its driver documents (go doc the driver package), and
//	    ttl= and autorenew= of lock.Open. memory:// is refused (exit
//	    status 2): its locks live inside one process, and each dlock run
//	    is a process of its own, so it would exclude nothing. A URL
//	    without a scheme (127.0.0.1:6379) is a usage error that suggests
//	    one. dlock never prints the URL's secrets (the password of its
//	    user info, and of a password= or other secret parameter): help,
//	    messages, logs and inspect's output show them as xxxxx.
//	-ttl DURATION
//	    Lease time (0, the default: the URL's ttl=, else 30s, as with
//	    lock.WithTTL(0)). The lease is renewed every TTL/3 while the
//	    command runs, so the TTL is how long the key stays locked after
//	    dlock dies without releasing it. With autorenew=false in the URL it
//	    is a hard time limit for the command.
//	-owner ID
//	    Name the lock's owner (default $DLOCK_OWNER; lock.WithOwner): while
//	    it holds KEY, a dlock run of KEY with the same owner is granted at
//	    once, as a re-entry, instead of waiting, and KEY is released when
//	    the last of them ends. The command gets DLOCK_OWNER, so a script
//	    that takes the lock itself can run under one that already holds
//	    it. The ZooKeeper driver refuses owners (exit status 2).
//	-limit N, -n N
//	    At most N commands run at once for KEY: take one of the N permits
//	    of a counting semaphore (Locker.Acquire) instead of the lock (the
//	    -n of consul lock). N is 1 or more. Not with -owner: a permit is
//	    not reentrant ($DLOCK_OWNER is ignored with a limit). See
//	    Semaphores below, and the -n rule.
//	-nonblock, -nb, -n
//	    Fail at once if the lock is held: the same as -wait 0 (the -n of
//	    flock). Not with a -wait other than 0.
//	-wait 0 | DURATION | forever, -w SECONDS
//	    How long to wait for the lock, counted from dlock's start. 0 tries
//	    once (flock -n); a duration (30s, 10m; a bare number is seconds,
//	    as in flock -w) waits that long; forever, the default, waits until
//	    the lock is granted. -w is the same flag.
//	-E N, -conflict-exit-code N
//	    Exit status when the lock is held elsewhere (default 1, as flock).
//	-grace DURATION
//	    After the lease is lost, how long the command has between SIGTERM
//	    and SIGKILL (default 5s; 0 sends SIGKILL at once).
//	-v, -log-level LEVEL
//	    Structured log (log/slog, text) on stderr: debug, info, warn (the
//	    default), error or off; -v is info. Info logs the grant (token, time
//	    waited), the wait when stderr is not a terminal (see Waiting),
//	    forwarded signals, the command's exit and the release; warn logs a
//	    lost lease and a failed release; debug adds the client libraries'
//	    own messages (go-redis, go-zookeeper), which dlock otherwise keeps
//	    off the command's stderr.
//
// # The -n rule
//
// -n is the flag of two tools: consul lock -n N limits the commands
// running at once, and flock -n fails at once instead of waiting. dlock
// run reads it by what follows: -n followed by a decimal integer that is
// itself followed by the KEY (another argument before the command, with
// or without --) is the limit; -n followed by anything else is flock's:
//
//	dlock run -n 3 builds -- make       # -limit 3, KEY builds
//	dlock run -n 3 builds make          # -limit 3, KEY builds
//	dlock run -n 3 -w 60 builds make    # -limit 3, flags between
//	dlock run -n nightly -- ./report.sh # -nonblock, KEY nightly
//	dlock run -n nightly ./report.sh    # -nonblock, KEY nightly
//	dlock run -n 5 -- ./job             # -nonblock, KEY 5 (no KEY after 5)
//	dlock run -n 5 ./job                # -nonblock, KEY 5
//	dlock run -n 5 ./job -- x           # -limit 5, KEY ./job: mind it
//
// -n=N is always the limit. Where a script must not depend on the rule,
// use -limit N and -nonblock (or -nb).
//
// # Connecting
//
// The Redis, PostgreSQL and memcached clients connect when the first
// request is sent; a ZooKeeper session is established when the backend is opened.
// dlock gives the backend -wait plus 2s to answer, counted from its
// start (with -wait forever, 2s: an unreachable backend is reported, not
// waited for in silence), and the first attempt at the key 2s: a backend
// that refuses the connection, or the password, makes dlock exit 125 and
// say so (connection refused, WRONGPASS) rather than wait. Only a held
// key is waited for. When -wait runs out, one last attempt tells a key
// still held (exit 1, -E) from a backend that stopped answering (125).
//
// # Semaphores
//
// With -limit N (or -n N: below, -n N stands for both), dlock run takes
// one of the N permits of KEY and holds it while the command runs, as it
// holds a lock otherwise: -wait, -ttl, renewal, signals, lost leases and
// the exit statuses are the same, and the command gets DLOCK_TOKEN (every
// permit has a token of its own from the key's one counter), DLOCK_LEASE
// (a permit's handle, mode pN) and DLOCK_LIMIT=N. A permit of a crashed
// dlock returns within its TTL, as a lock does.
//
// Every dlock run -n of KEY must give the same N while any of them holds
// a permit: one with another N exits 2 (the backend's semaphore has the
// first N until its last permit ends). -wait 0 takes a free permit or
// exits 1 (-E) when all N are taken.
//
// Locks and permits of one KEY exclude each other: while any dlock run -n
// of KEY runs, a dlock run of KEY without -n waits, and the other way
// round. On backends whose driver queues its waiters (memory, and the
// Redis and ZooKeeper drivers), locks and permits wait in one queue, in
// arrival order (the contract of driver.Permit): a permit waiter
// does not pass an earlier lock waiter, even with a permit free, nor a
// lock waiter an earlier permit waiter. So -n 1 excludes and queues like
// the plain lock of KEY, and the two can be mixed; it differs in that it
// cannot take -owner, gives a permit's handle and DLOCK_LIMIT=1, and
// holds the key's semaphore at 1 while it runs (a -n 2 run then exits 2).
// A run with -owner is not queued (named owners wait by polling), so it
// may be passed by later waiters.
//
// Permits need a backend whose driver grants them; with another, -n exits
// 2 and says why.
//
// # Waiting
//
// While it waits for the lock, and stderr is a terminal, dlock shows what
// it waits for and for how long on one line that it redraws in place and
// erases once the lock is granted:
//
//	waiting for lock "deploy/api" on redisnx://localhost:6379: 3.2s (gives up after 10m0s)
//
// When stderr is not a terminal (cron, CI), there is no line to redraw;
// with -v dlock logs a record instead, after 5s and then every 5s for the
// first minute, every 30s after that:
//
//	level=INFO msg="dlock: waiting for lock \"deploy/api\"" key=deploy/api waited=5s backend=redisnx://localhost:6379 gives_up_after=10m0s holder="exclusive 3f1c...e9, 27.4s left"
//
// holder is what lock.Inspect tells of the key's first holder (its mode,
// owner, time left where the backend knows it; for a semaphore how many
// of its permits are taken), left out when the backend cannot tell.
//
// A signal (below) ends the wait; the command then does not run.
//
// # Exit status
//
//	0-255   the command's own exit status, or 128+N if signal N killed it
//	1       the lock is held elsewhere: -wait 0 (-nonblock, -n) found it
//	        held, or -wait DURATION ran out (change it with -E)
//	2       usage: bad flags or arguments (a flag after KEY, a command
//	        starting with - without --, -nonblock with a -wait, -n N and
//	        -limit disagreeing), an invalid key, TTL or URL (one without a
//	        scheme, or memory://); a limit on a backend without permits, or one other
//	        than the one KEY's running permits were taken with
//	124     the lease was lost while the command ran, and the command was
//	        terminated (or the loss was seen as it exited)
//	125     the backend could not be opened or failed while taking the
//	        lock: unreachable within -wait plus 2s, refused the connection
//	        or the password (see Connecting)
//	126     the command was found but could not be started
//	127     the command was not found
//	128+N   dlock got signal N while waiting for the lock; the command did
//	        not run
//
// Whenever dlock chooses the status itself, rather than passing on the
// command's, it writes a line starting with "dlock:" to stderr saying why.
// The codes can coincide with the command's own (most programs exit 1 on
// failure): where a script must tell a skipped run from a failed one, give
// -E a status the command never uses, such as 75 (EX_TEMPFAIL). 124 to 127
// follow timeout(1) and env(1), and commands rarely use them.
//
// # Signals
//
// SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to dlock are
// forwarded to the command's process group; dlock keeps running, holding
// the lock, until the command exits, and then exits with the command's
// status (143 for a command that SIGTERM killed). A signal that dlock was
// started with ignored (SIGHUP under nohup, SIGINT in a background job) is
// left ignored, for dlock and the command alike.
//
// The command runs in a process group of its own, as with timeout(1) and
// consul lock, for two reasons. Everything the command starts (a shell
// script's children) is part of the job the lock protects, so a signal
// meant for the job, and the termination after a lost lease, must reach all
// of it, not only its first process. And a Ctrl-C on the terminal then
// reaches the command once, through dlock, rather than twice (once from the
// terminal, once forwarded). The cost: the command is not in the terminal's
// foreground process group, so a command that reads from the terminal is
// stopped (SIGTTIN). dlock is meant for non-interactive jobs.
//
// On Linux the command is also killed (SIGKILL) if dlock itself dies, by
// SIGKILL or the OOM killer, say: nothing would renew the lease any more.
// Processes the command leaves behind in the background when it exits are
// not waited for; the lock is released when the command exits.
//
// # Lost leases
//
// A lease is lost when a renewal finds the grant gone (deleted, or taken by
// another owner, behind dlock's back), or when no renewal succeeded before
// the lease's local deadline, about a TTL after the last successful one
// (the backend unreachable, say). The first is found at the next renewal,
// within TTL/3; the second before another client could be granted the key,
// as measured by dlock's clock. dlock then sends SIGTERM to the command's process group,
// SIGKILL after -grace to what is left of it, and exits with status 124
// once the command has exited. Until the command stops, another holder may
// already run: fencing tokens (DLOCK_TOKEN), checked by the resource, are
// what make that harmless.
//
// # dlock elect
//
// elect campaigns in the leader election NAME (lock.Election) and runs
// COMMAND only while this instance leads: one scheduler among several
// standby instances, say. Candidates wait in arrival order; the leader's
// term is a lease of NAME, renewed while COMMAND runs.
//
//	dlock elect -announce "$(hostname):8080" scheduler ./scheduler
//	dlock elect -again scheduler ./scheduler   # after a lost term, stand again
//
// COMMAND gets DLOCK_KEY (NAME), DLOCK_TERM and DLOCK_TOKEN (the term
// number, a fencing token that increases across leaders) and
// DLOCK_LEASE. When renewals fail, COMMAND gets SIGTERM once the term's
// deadline is -grace away (at most half the term's validity, lock.Lease's
// Validity, which a renewed term never comes within) and SIGKILL at the
// deadline, so it is gone before any other candidate can be elected. A term ended behind dlock's back
// (its grant deleted) stops COMMAND as under a lost lease (SIGTERM, then
// SIGKILL after -grace). dlock then exits 124, or with -again campaigns
// again.
// When COMMAND exits on its own, dlock resigns and exits with its status.
// Signals are forwarded as by dlock run. -announce (default host:pid) is
// stored with the term where the backend stores notes (lock.Notes),
// and dlock inspect NAME shows it. The exit statuses are dlock run's.
//
// # dlock inspect
//
// dlock inspect [-url URL] [-json] [-timeout 15s] KEY shows who holds KEY
// and who waits for it (lock.Inspect), changing nothing: a heading, then
// one line per holder and per queued waiter with its mode (exclusive,
// shared, permit/N), owner (a lease's owner token, as in its DLOCK_LEASE;
// a named owner's 16 hex digits, lock.Owner; a foreign lock's value),
// fencing token, time left and since when, "?" where the backend cannot
// tell (memcached: the time left, an anonymous grant's token, the waiters,
// who poll; ZooKeeper: the time left; Redis: when a holder was granted).
// -json prints one object instead, leaving out what is unknown and naming
// it under "unknown". -timeout (default 10s) bounds the whole of it, a
// duration or seconds as for dlock run. Exit status: 0 when KEY is held,
// 1 when it is free,
// 2 on usage errors (flags, KEY, URL), 125 when the backend could not be
// reached or failed.
//
// # dlock schema
//
// dlock schema [URL] prints the SQL that creates dlock's tables and
// functions for the backend of URL (or $DLOCK_URL), with the URL's
// schema=NAME applied, and makes no connection. A database administrator
// runs it once as a role with the CREATE right; the application's URL
// then sets create_schema=false (see driver/postgres, "Schema made by
// hand"):
//
//	dlock schema 'postgres://app@db/app?schema=locks' | psql -U admin -d app
//
// Only PostgreSQL has a schema: for the other backends it says so and
// exits 1. Exit status: 0 when the SQL was printed, 1 when the backend has
// none, 2 on usage errors.
//
// # dlock demo
//
// The demo is compiled in only with -tags demo, as make demo builds dlock
// from a clone of the repository; a dlock built without it (go install)
// answers dlock demo with how to get it, and carries none of its code.
//
// demo runs worker processes that contend for a few keys on every reachable
// network backend, one backend after the other, with live progress, then
// shows a lease lost on that backend, and ends with a table per backend:
// grants, overlaps observed (two workers holding a key at once: must be
// 0), whether fencing tokens were strictly increasing, and the wait for
// the lock at the 50th and 99th percentile.
//
//	make demo                        # go build -tags demo, then dlock demo -start-servers
//	dlock demo -url redisnx://localhost:6379 -url zookeeper://localhost:2181/demo
//
// Each worker is a separate dlock process (the hidden subcommand
// demo-worker) with its own connections. Right after each grant it enters a
// file shared by the workers of that key, and right before the release it
// leaves it; a flock(2) on the file makes each entry and exit atomic. A
// worker that finds another one inside reports an overlap, and one whose
// token is not above the highest seen reports a stale token. No clocks are
// compared between processes.
//
// After the workers, two holders in the demo's process, A and B, each
// with a Locker and connections of its own, show on the same backend what
// the lock does when a lease is lost, in two lines:
//
//	redisnx     A holds token 1795771131787784, server paused (SIGSTOP) 1.2s: A's Done at 0.99s, B granted at 1.20s
//	redisnx     B writes with token 1795771132991921: accepted; A, late, with 1795771131787784: refused
//
// A takes a key (a 1s TTL; memcached's shortest, 3s; a 2s session on
// ZooKeeper) and writes to a resource that checks fencing tokens. Where
// the demo started the server, it pauses it with SIGSTOP a little longer
// than the grant lives there: A's renewals go unanswered, and A's Done
// must fire before B, asking once the server resumes, is granted the key.
// On a server it did not start, it deletes A's grant behind A's back with
// the backend's own client instead (Redis DEL, memcached delete, the
// ZooKeeper lock node's delete, PostgreSQL's DELETE of the grant's row of
// dlock.entries): B is granted at once, before A learns of the loss at its
// next renewal, which is what no lock can prevent and what fencing tokens
// are for. Either way B writes with its token, which the resource accepts,
// and A, late, with its old one, which the resource refuses. Times count
// from the pause or the deletion. A scene that goes otherwise (Done not
// firing, or firing after B's grant on a paused server, B's token not above
// A's, a write taken wrongly) fails the backend.
//
// The backends are those of -url (repeatable), else $DLOCK_URL, else every
// compiled-in network driver on its server's standard port on localhost
// (6379, 11211, 2181, and postgres://localhost:5432/postgres, whose user and
// password pgx takes from PGUSER and PGPASSWORD or ~/.pgpass, as psql does;
// name another with -url postgres://USER:PASSWORD@HOST:5432/DB).
// -start-servers instead starts redis-server, memcached, ZooKeeper and
// PostgreSQL (its server programs from PATH or /usr/lib/postgresql/*/bin,
// run as the postgres user when dlock runs as root) on free loopback ports,
// the way the tests do (internal/testsupport/testserver, which also honours
// DLOCK_REDIS_ADDR, DLOCK_POSTGRES_URL and their siblings), and stops them
// at the end. A server that is not installed is reported as such and left
// out (apt-get install redis-server memcached zookeeper postgresql); one
// that is installed and fails to start, as failing to start, with why.
// memory:// is left out: a memory store lives in one
// process and the workers are separate processes.
//
// Flags: -workers (4), -keys (3), -duration per backend (2.5s), -hold, the
// mean time a worker holds a lock (2ms), -ttl of the workers' leases
// (5s), -v and -log-level; durations take plain seconds too.
//
// demo exits 0 when every backend passed, 1 when one did not (an overlap,
// a stale token, a worker's lost lease, an error, a failed lease-loss
// scene), 2 on a usage error, 125 when no backend is reachable, and 130
// when interrupted.
//
// # dlock version
//
// dlock version (also -version and --version) prints the module version
// the build recorded (go install github.com/dlock-go/dlock/cmd/dlock@v1.2.3
// records v1.2.3; a build in a checkout prints devel, with the VCS
// revision when the build recorded one), the Go version and the platform.
//
// # Backends
//
// dlock has every backend: redisnx, rediswatch, postgres, memcached,
// zookeeper, etcd (and memory). It is a Go module of its own,
// github.com/dlock-go/dlock/cmd/dlock, that requires dlock's main module
// and etcd's driver, itself a module of its own so that etcd's client
// (gRPC, protobuf) reaches no program that does not use it:
//
//	go install github.com/dlock-go/dlock/cmd/dlock@latest   # a release
//	go build -o dlock ./cmd/dlock                            # in a clone, at its root
//
// In a clone, go.work makes the build use the clone's modules. dlock help
// lists the backends compiled in; dlock demo (make demo) runs on every one.
//
// # Platforms
//
// dlock needs a Unix system (process groups, flock); the parent-death
// signal needs Linux.
package main
