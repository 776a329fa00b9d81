package nemesis

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/dlock-go/dlock/driver/memory"
	"github.com/dlock-go/dlock/driver/redisnx"
	"github.com/dlock-go/dlock/driver/rediswatch"
	"github.com/dlock-go/dlock/harness/chaos"
	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"

	// The drivers the targets open by URL.
	_ "github.com/dlock-go/dlock/driver/memcached"
	_ "github.com/dlock-go/dlock/driver/postgres"
	_ "github.com/dlock-go/dlock/driver/zookeeper"
)

// Target is what a run checks: a driver on its backend, or a negative
// control (one of chaos's broken algorithms).
type Target struct {
	Name    string
	Backend chaos.Backend // "" for the in-process memory driver
	Control *chaos.Control
	Shared  bool // the Lockers grant shared leases
	// Permits: the Lockers grant semaphore permits.
	Permits bool
	// Reentry: the driver keeps holds for named owners (lock.WithOwner).
	Reentry bool
	// Resume: the driver resumes leases (Locker.Resume): live leases'
	// handles are resumed through other Lockers, and Resume races Close
	// (see resume_ops.go).
	Resume bool
	// Notify: the driver's waiters hear of releases on Redis pub/sub
	// connections, or PostgreSQL LISTEN connections, which are delayed
	// apart from the commands, and which an adversary with pub/sub rights
	// only (on PostgreSQL: no right on dlock's schema; anyone may LISTEN
	// and NOTIFY) listens to and forges messages on (see faults_delay.go,
	// adversary.go, adversary_pg.go).
	Notify bool
	// AllFaults: a run of allFaultsRun or longer must inject every kind
	// of fault the nemesis may pick for the target (see Unexercised); once
	// the first phase is over, the nemesis tries the kinds not injected
	// yet first, those that take the server before the others
	// (nemesis.injectDue).
	AllFaults bool
	// TTL is the Lockers' default; LockTTLs and RefreshTTLs are those the
	// workers pick from, longer and shorter.
	TTL                   time.Duration
	LockTTLs, RefreshTTLs []time.Duration
	// Bound is how long a grant can outlive a holder that stopped renewing
	// (the longest TTL, or ZooKeeper's session timeout); Recovery how long
	// after a server fault a free key may take to be granted again.
	Bound, Recovery time.Duration
	ReleaseTimeout  time.Duration
	Server          chaos.ServerOptions
	// Long: run only in the long mode (make nemesis), it takes longer to
	// set up (an ensemble, a cluster).
	Long bool
	// Open names a failure of the real driver found by this target and
	// not fixed yet (the issue that tracks it, docs/safety.md): the target
	// runs only when NEMESIS_DRIVERS names it, so that make nemesis tells
	// new failures, and its summary line says why it was left out.
	Open string
	// Broken, for a negative control of this package's own (not one of
	// chaos's), says how it breaks the contract.
	Broken string
	// memory, for a target over the memory driver's Store, opens its
	// Lockers instead of memory.New (a broken variant's).
	memory func(store *memory.Store, o lock.Options) Locker
	// view and do, for a broken variant, replace the workers' view of the
	// leases they get (nil: the lease itself) and lock.Do (nil: lock.Do).
	view func(op string, l *lock.Lease) leaseView
	do   doFunc
	// cluster: a Redis Cluster, opened with a client whose dialer maps
	// each node's address to its proxy (addresses come as real=proxy).
	cluster  bool
	newRedis func(client redis.UniversalClient, o lock.Options) Locker
	url      string // with %s for the addresses
	// classify names the kind of a request, for lost and held replies:
	// "grant", "wait" (a queued waiter's step, which may grant), "release",
	// "refresh", or "".
	classify func(chaos.Request) string
	// etcdAuth: etcd's authentication is on (prepare turns it on), and
	// the adversary is a reader (adversary_etcd.go).
	etcdAuth bool
	// opener, if set, opens the Lockers instead of the URL (a broken
	// variant's, over a client of its own).
	opener func(ctx context.Context, addrs []string, o lock.Options) (Locker, error)
	// prepare, if set, readies a server Run started before any Locker is
	// opened (a broken variant's schema).
	prepare func(srv *chaos.Server) error
	// The environment around the server (targets_env.go): isolation runs
	// the PostgreSQL database under each default isolation level in turn
	// (env_pg.go); bouncer puts PgBouncer in transaction mode in front of
	// it, restarted as a fault; members faults one etcd member at a time
	// (faults_member.go), no other server fault.
	isolation, bouncer, members bool
	// skipOnce: no check of the keys used once after the run (a broken
	// variant that does not break it; see onceResidue). onceWait, if set,
	// is how long past Bound the backend may take to drop what they left
	// (default onceWait).
	skipOnce bool
	onceWait time.Duration
}

// Session is the ZooKeeper session timeout of the zookeeper target.
const Session = 2 * time.Second

func ms(d ...time.Duration) []time.Duration { return d }

var targets = []*Target{
	{
		Name: "memory", Reentry: true, Resume: true, Shared: true, Permits: true, TTL: time.Second,
		LockTTLs: ms(300*time.Millisecond, time.Second, 2*time.Second), RefreshTTLs: ms(100*time.Millisecond, 300*time.Millisecond, time.Second, 3*time.Second),
		Bound: 3 * time.Second, Recovery: time.Second, ReleaseTimeout: time.Second,
	},
	{
		Name: "redisnx", Reentry: true, Resume: true, Notify: true, Backend: chaos.RedisBackend, Shared: true, Permits: true, TTL: time.Second,
		LockTTLs: ms(500*time.Millisecond, time.Second, 2*time.Second, 3*time.Second), RefreshTTLs: ms(300*time.Millisecond, 600*time.Millisecond, time.Second, 2*time.Second, 4*time.Second),
		Bound: 4 * time.Second, Recovery: 3 * time.Second, ReleaseTimeout: time.Second,
		Server: chaos.ServerOptions{Persistence: true}, url: "redisnx://%s/0", classify: classifyRESP,
	},
	{
		Name: "rediswatch", Reentry: true, Resume: true, Notify: true, Backend: chaos.RedisBackend, Shared: true, Permits: true, TTL: time.Second,
		LockTTLs: ms(500*time.Millisecond, time.Second, 2*time.Second, 3*time.Second), RefreshTTLs: ms(300*time.Millisecond, 600*time.Millisecond, time.Second, 2*time.Second, 4*time.Second),
		Bound: 4 * time.Second, Recovery: 3 * time.Second, ReleaseTimeout: time.Second,
		Server: chaos.ServerOptions{Persistence: true}, url: "rediswatch://%s/0", classify: classifyRESP,
	},
	{
		// memcached counts whole seconds from 3s, and grants N seconds a
		// validity of N-2.
		Name: "memcached", Reentry: true, Resume: true, Backend: chaos.MemcachedBackend, TTL: 4 * time.Second,
		LockTTLs: ms(3*time.Second, 4*time.Second, 5*time.Second), RefreshTTLs: ms(3*time.Second, 4*time.Second, 6*time.Second),
		Bound: 7 * time.Second, Recovery: 3 * time.Second, ReleaseTimeout: time.Second,
		url: "memcached://%s", classify: classifyMemcached,
	},
	{
		// A lease's validity is the session timeout, whatever its TTL.
		Name: "zookeeper", Backend: chaos.ZooKeeperBackend, Shared: true, Permits: true, TTL: 2 * time.Second,
		LockTTLs: ms(time.Second, 2*time.Second, 3*time.Second), RefreshTTLs: ms(time.Second, 2*time.Second, 3*time.Second),
		Bound: Session + time.Second, Recovery: 2*Session + time.Second, ReleaseTimeout: time.Second,
		url: "zookeeper://%s/nemesis?session_timeout=" + Session.String(), classify: classifyZK,
	},
	{
		// As a non-superuser role that may create the driver's schema
		// (chaos.PostgresUser); the server keeps its data through kills.
		// A key used once leaves rows until a Locker's sweep a minute
		// after its last grant (driver/postgres, # Sweep).
		Name: "postgres", Reentry: true, Resume: true, Notify: true, AllFaults: true, Backend: chaos.PostgresBackend, Shared: true, Permits: true, TTL: time.Second, onceWait: 70 * time.Second,
		LockTTLs: ms(500*time.Millisecond, time.Second, 2*time.Second, 3*time.Second), RefreshTTLs: ms(300*time.Millisecond, 600*time.Millisecond, time.Second, 2*time.Second, 4*time.Second),
		Bound: 4 * time.Second, Recovery: 3 * time.Second, ReleaseTimeout: time.Second,
		url: pgURL(""), classify: classifyPG,
	},
	{
		// Three masters, no replicas: a node paused or killed makes the
		// cluster refuse every command until it is back.
		Name: "redisnx-cluster", Reentry: true, Resume: true, Notify: true, Backend: chaos.RedisBackend, Shared: true, Permits: true, TTL: time.Second, Long: true, cluster: true,
		LockTTLs: ms(500*time.Millisecond, time.Second, 2*time.Second, 3*time.Second), RefreshTTLs: ms(300*time.Millisecond, 600*time.Millisecond, time.Second, 2*time.Second, 4*time.Second),
		Bound: 4 * time.Second, Recovery: 6 * time.Second, ReleaseTimeout: time.Second,
		Server: chaos.ServerOptions{Persistence: true, Cluster: true}, classify: classifyRESP,
		newRedis: func(c redis.UniversalClient, o lock.Options) Locker {
			return redisnx.New(c, &redisnx.Options{Options: o})
		},
	},
	{
		Name: "rediswatch-cluster", Reentry: true, Resume: true, Notify: true, Backend: chaos.RedisBackend, Shared: true, Permits: true, TTL: time.Second, Long: true, cluster: true,
		LockTTLs: ms(500*time.Millisecond, time.Second, 2*time.Second, 3*time.Second), RefreshTTLs: ms(300*time.Millisecond, 600*time.Millisecond, time.Second, 2*time.Second, 4*time.Second),
		Bound: 4 * time.Second, Recovery: 6 * time.Second, ReleaseTimeout: time.Second,
		Server: chaos.ServerOptions{Persistence: true, Cluster: true}, classify: classifyRESP,
		newRedis: func(c redis.UniversalClient, o lock.Options) Locker {
			return rediswatch.New(c, &rediswatch.Options{Options: o})
		},
	},
	{
		// Three servers: the leader is killed and comes back, servers
		// pause alone; an election takes seconds.
		Name: "zookeeper-ensemble", Backend: chaos.ZooKeeperBackend, Shared: true, Permits: true, TTL: 2 * time.Second, Long: true,
		LockTTLs: ms(time.Second, 2*time.Second, 3*time.Second), RefreshTTLs: ms(time.Second, 2*time.Second, 3*time.Second),
		Bound: Session + time.Second, Recovery: 2*Session + 3*time.Second, ReleaseTimeout: time.Second,
		Server: chaos.ServerOptions{Ensemble: true},
		url:    "zookeeper://%s/nemesis?session_timeout=" + Session.String(), classify: classifyZK,
	},
}

func init() {
	for _, c := range chaos.Controls {
		t := &Target{
			Name: "ctl-" + c.Name, Backend: c.Backend, Control: c, TTL: c.TTL,
			LockTTLs: ms(c.TTL, 2*c.TTL), RefreshTTLs: ms(c.TTL/2, c.TTL, 2*c.TTL),
			Bound: 2 * c.TTL, Recovery: 3 * time.Second, ReleaseTimeout: time.Second,
			classify: classifyRESP,
		}
		if c.Backend == chaos.MemcachedBackend {
			t.LockTTLs, t.RefreshTTLs, t.Bound, t.classify = ms(c.TTL, 3*time.Second), ms(c.TTL, 3*time.Second), 4*time.Second, classifyMemcached
		}
		targets = append(targets, t)
	}
}

// Drivers are the names of the real drivers' targets, in run order; with
// long, those that take longer to set up too.
func Drivers(long bool) []string {
	var out []string
	for _, t := range targets {
		if !t.control() && (long || !t.Long) && t.Open == "" {
			out = append(out, t.Name)
		}
	}
	return out
}

// Left are the real drivers' targets that Drivers leaves out for a known,
// open failure (Target.Open), with the failure.
func Left() map[string]string {
	out := map[string]string{}
	for _, t := range targets {
		if t.Open != "" {
			out[t.Name] = t.Open
		}
	}
	return out
}

// Controls are the names of the negative controls' targets.
func Controls() []string {
	var out []string
	for _, t := range targets {
		if t.control() {
			out = append(out, t.Name)
		}
	}
	return out
}

// control reports whether t is a negative control: a broken algorithm.
func (t *Target) control() bool { return t.Control != nil || t.Broken != "" }

// TargetByName returns the target named name, or nil.
func TargetByName(name string) *Target {
	for _, t := range targets {
		if t.Name == name {
			return t
		}
	}
	return nil
}

// open makes a Locker with its own client to addrs (the memory driver:
// over store).
func (t *Target) open(ctx context.Context, addrs []string, store *memory.Store) (Locker, error) {
	o := lock.Options{TTL: t.TTL, ReleaseTimeout: t.ReleaseTimeout}
	switch {
	case t.Control != nil:
		return t.Control.Open(ctx, addrs, o, chaos.Hooks{})
	case t.Backend == "" && t.memory != nil:
		return t.memory(store, o), nil
	case t.Backend == "":
		return memory.New(store, &o), nil
	case t.cluster:
		return t.openCluster(addrs, o), nil
	case t.opener != nil:
		return t.opener(ctx, addrs, o)
	}
	u := fmt.Sprintf(t.url, strings.Join(addrs, ","))
	if t.Backend == chaos.ZooKeeperBackend {
		return lock.OpenWith(ctx, u, &o) // a grant lasts its session: ttl= is refused
	}
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	return lock.OpenWith(ctx, u+sep+"ttl="+url.QueryEscape(t.TTL.String()), &o)
}

// openRetry is open, tried again until timeout (a server may be
// restarting, a partition healing).
func (t *Target) openRetry(addrs []string, store *memory.Store, timeout time.Duration) (Locker, error) {
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		lk, err := t.open(ctx, addrs, store)
		cancel()
		if err == nil || time.Now().After(deadline) {
			return lk, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// openCluster makes a Locker over a Redis Cluster client of its own, whose
// dialer sends each node's connections to its proxy: addrs are
// "node=proxy" (or plain node addresses).
func (t *Target) openCluster(addrs []string, o lock.Options) Locker {
	var nodes []string
	via := map[string]string{}
	for _, a := range addrs {
		node, proxy, ok := strings.Cut(a, "=")
		nodes = append(nodes, node)
		if ok {
			via[node] = proxy
		}
	}
	rdb := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: nodes, ContextTimeoutEnabled: true,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if p, ok := via[addr]; ok {
				addr = p
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	})
	return ownedBy(t.newRedis(rdb, o), rdb)
}

// ownedBy wraps lk in an ownClient that closes client after lk.
func ownedBy(lk Locker, client io.Closer) Locker {
	return &ownClient{Locker: lk, client: client}
}

// ownClient is a Locker that closes the client it was opened over.
type ownClient struct {
	Locker
	client io.Closer
}

func (o *ownClient) Close() error {
	err := o.Locker.Close()
	o.client.Close()
	return err
}

// classifyRESP names the requests of redisnx (scripts), rediswatch
// (transactions) and the Redis controls (plain commands). A queued
// waiter's step is a "wait": redisnx's wait.lua (it names the waiter's
// inbox), rediswatch's transactions on the queue that release no lock
// ("wait-grant" those that take the lock key: set it, extend the key a
// release handed over, or read it with the grant record, a claim).
func classifyRESP(r chaos.Request) string {
	switch r.Cmd {
	case "EVALSHA", "EVAL":
		// redisnx: the scripts' keys say which is which (driver/redisnx,
		// keys.go): a grant or a wait takes [lock, fence, void, queue,
		// entries], a release [lock, fence, queue, entries, (void)], a
		// refresh lock keys only.
		if len(r.Args) < 3 {
			return ""
		}
		var n int
		if _, err := fmt.Sscan(r.Args[1], &n); err != nil || n < 1 || len(r.Args) < 2+n {
			return ""
		}
		keys := r.Args[2 : 2+n]
		switch {
		case slices.ContainsFunc(r.Args[2+n:], func(a string) bool { return strings.Contains(a, redisx.InboxInfix) }):
			return "wait"
		case n >= 3 && strings.HasSuffix(keys[1], ":fence") && strings.Contains(keys[2], ":void:"):
			return "grant"
		case n >= 3 && strings.HasSuffix(keys[1], ":fence") && strings.HasSuffix(keys[2], ":q"):
			return "release"
		case !slices.ContainsFunc(keys, func(k string) bool { return strings.HasSuffix(k, ":fence") }):
			return "refresh"
		}
	case "EXEC":
		// A lock key is P{K}: it ends with the hash tag's brace.
		lockKey := func(k string) bool { return strings.HasSuffix(k, "}") }
		var del, delLock, queue, set, setLock, pexpire, pexpireLock, record bool
		for _, q := range r.Queued {
			switch q.Cmd {
			case "DEL":
				del = true
				delLock = delLock || slices.ContainsFunc(q.Args, lockKey)
			case "SET":
				set = true
				setLock = setLock || len(q.Args) > 0 && lockKey(q.Args[0])
			case "PEXPIRE":
				pexpire = true
				pexpireLock = pexpireLock || len(q.Args) > 0 && lockKey(q.Args[0])
			case "GET":
				record = record || len(q.Args) > 0 && strings.Contains(q.Args[0], "}:wg:")
			}
			queue = queue || len(q.Args) > 0 && strings.HasSuffix(q.Args[0], ":wq")
		}
		switch {
		case delLock:
			return "release"
		case queue && (setLock || pexpireLock || record):
			// The waiter takes the key: free (SET), or handed to it by a
			// release (PEXPIRE to its TTL, then out of the queue; or a
			// claim's reads of the key and its grant record, whose reply
			// is the grant).
			return "wait-grant"
		case queue:
			return "wait"
		case del:
			return "release"
		case set:
			return "grant"
		case pexpire:
			return "refresh"
		}
	case "BLPOP": // a redisnx waiter's grant list (faults_blpop.go)
		return "blpop"
	case "SET", "SETNX", "GETSET":
		return "grant"
	case "DEL":
		return "release"
	case "PEXPIRE", "EXISTS":
		return "refresh"
	}
	return ""
}

// pgURL is the postgres target's URL (with %s for the address) with the
// extra query parameters query ("k=v&...", or "").
func pgURL(query string) string {
	u := chaos.PostgresURLFormat
	if query != "" {
		u += "&" + query
	}
	return u
}

// pgCall finds the function of the driver's schema a statement calls
// (driver/postgres: "SELECT ... FROM dlock.acquire3($1, ...)"; lock3 and
// unlock3 are the exclusive Lock's and Unlock's, with the fast path of
// the grant in the key's row; schema version 2 had no 3 in the names).
var pgCall = regexp.MustCompile(`\b[a-z_][a-z0-9_]*\.(acquire|check_turn|release|refresh|resume|lock|unlock)3?\(`)

// classifyPG: each step of driver/postgres is one call of a function of
// its schema (schema.sql): acquire3 and lock3 grant (or queue),
// check_turn3 is a queued waiter's step, release3 and unlock3 release
// (release3 also a waiter's Leave), refresh3 and resume3 extend. A
// request that only prepares the statement (pgx's statement cache) runs
// nothing. Since schema version 9 an uncontended Lock and Unlock are
// first plain UPDATEs of the key's row (plainSteps in driver/postgres):
// the one that sets the counter grants, the one that clears the holder
// releases.
func classifyPG(r chaos.Request) string {
	if r.Cmd != "execute" && r.Cmd != "query" {
		return ""
	}
	switch {
	case strings.Contains(r.SQL, ".keys x SET counter = "):
		return "grant"
	case strings.Contains(r.SQL, ".keys x SET holder = NULL"):
		return "release"
	}
	m := pgCall.FindStringSubmatch(r.SQL)
	if m == nil {
		return ""
	}
	switch m[1] {
	case "acquire", "lock":
		return "grant"
	case "check_turn":
		return "wait"
	case "unlock":
		return "release"
	}
	return m[1]
}

// classifyMemcached: add grants; cas with exptime -1 releases, another cas
// refreshes (driver/memcached); the control deletes and touches.
func classifyMemcached(r chaos.Request) string {
	switch r.Cmd {
	case "add":
		return "grant"
	case "delete":
		return "release"
	case "touch":
		return "refresh"
	case "cas":
		if len(r.Args) >= 3 && r.Args[2] == "-1" {
			return "release"
		}
		return "refresh"
	}
	return ""
}

// classifyZK: lock nodes are "..-lock-<seq>"; a grant creates one (a multi
// with the key node's setData, or a plain create), a release deletes it, a
// refresh reads it.
func classifyZK(r chaos.Request) string {
	lockPath := slices.ContainsFunc(r.Paths, func(p string) bool { return strings.Contains(p, "-lock-") })
	switch {
	case !lockPath:
		return ""
	case r.Cmd == "multi" || strings.HasPrefix(r.Cmd, "create"):
		return "grant"
	case r.Cmd == "delete":
		return "release"
	case !r.Mutating && r.Cmd != "ping":
		return "refresh"
	}
	return ""
}
