package nemesis

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/dlock-go/dlock/harness/chaos"

	// The etcd targets open the driver by URL.
	_ "github.com/dlock-go/dlock/driver/etcd"
)

// The etcd targets: the driver by its URL, on a single member; on a
// three-member cluster (members paused, killed and restarted one at a
// time; the leader killed) with etcd's authentication on and the reader
// adversary (adversary_etcd.go); and on a single member with both.
// etcd's least lease is a second, and a TTL is rounded up to whole
// seconds; a lease of a leader that died is renewed by the next leader
// (etcd extends every lease by its TTL on election), so a grant can
// outlive a stopped holder by up to twice its TTL there.
func init() {
	targets = append(targets,
		&Target{
			Name: "etcd", Reentry: true, Resume: true, Shared: true, Permits: true, AllFaults: true,
			Backend: chaos.EtcdBackend, TTL: 2 * time.Second,
			LockTTLs: ms(time.Second, 2*time.Second, 3*time.Second), RefreshTTLs: ms(time.Second, 2*time.Second, 4*time.Second),
			Bound: 5 * time.Second, Recovery: 3 * time.Second, ReleaseTimeout: time.Second,
			url: "etcd://%s/nemesis", classify: classifyEtcd,
		},
		&Target{
			Name: "etcd-cluster", Reentry: true, Resume: true, Shared: true, Permits: true, AllFaults: true, Long: true,
			Backend: chaos.EtcdBackend, TTL: 2 * time.Second,
			LockTTLs: ms(time.Second, 2*time.Second, 3*time.Second), RefreshTTLs: ms(time.Second, 2*time.Second, 4*time.Second),
			Bound: 9 * time.Second, Recovery: 6 * time.Second, ReleaseTimeout: time.Second,
			Server: chaos.ServerOptions{EtcdCluster: true},
			url:    etcdURL, classify: classifyEtcd, etcdAuth: true, prepare: etcdAuth,
		},
		// A member with etcd's authentication on, and the reader
		// adversary: a restart forgets the member's simple tokens, and
		// the Lockers must log in again (NEMESIS_SEED=622068163 found
		// that etcd's client could not, against etcd 3.4: driver/etcd's
		// login).
		&Target{
			Name: "etcd-auth", Reentry: true, Resume: true, Shared: true, Permits: true, AllFaults: true, Long: true,
			Backend: chaos.EtcdBackend, TTL: 2 * time.Second,
			LockTTLs: ms(time.Second, 2*time.Second, 3*time.Second), RefreshTTLs: ms(time.Second, 2*time.Second, 4*time.Second),
			Bound: 5 * time.Second, Recovery: 3 * time.Second, ReleaseTimeout: time.Second,
			url: etcdURL, classify: classifyEtcd, etcdAuth: true, prepare: etcdAuth,
		},
	)
}

// etcdURL logs in as the application's user (see etcdAuth).
var etcdURL = "etcd://" + chaos.EtcdAppUser + ":" + chaos.EtcdAppPassword + "@%s/nemesis"

// etcdAuth turns etcd's authentication on before the run: the Lockers
// log in as the application's user, the adversary as a reader.
func etcdAuth(srv *chaos.Server) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return chaos.EtcdEnableAuth(ctx, srv.Addrs, etcdPrefix)
}

// classifyEtcd names driver/etcd's requests (chaos decodes each Txn's
// compares and operations): a Txn that writes the key's counter grants
// (an Acquire, or a queued waiter's step that found its turn); one that
// creates an entry if absent is a Join ("wait"); one that deletes
// releases, as a LeaseRevoke does; one that moves an entry to another
// lease, a LeaseKeepAlive message and a Txn that reads entries (not a
// queue) refresh.
func classifyEtcd(r chaos.Request) string {
	counter := slices.ContainsFunc(r.Paths, func(p string) bool { return strings.Contains(p, "/c/") })
	has := func(a string) bool { return slices.Contains(r.Args, a) }
	switch r.Cmd {
	case "LeaseKeepAlive":
		return "refresh"
	case "LeaseRevoke":
		return "release"
	case "Txn":
	default:
		return ""
	}
	switch {
	case counter && has("put-lease"):
		return "grant"
	case has("del"):
		return "release"
	case has("cmp:createequal") && has("put-lease"):
		return "wait"
	case has("cmp:leaseequal") && has("put-lease"):
		return "refresh"
	case !r.Mutating && !counter && len(r.Paths) > 0 && !slices.ContainsFunc(r.Paths, func(p string) bool { return strings.HasSuffix(p, "/") }):
		return "refresh"
	}
	return ""
}
