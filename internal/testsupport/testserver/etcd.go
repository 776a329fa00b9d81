package testserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// EtcdOptions configures etcd members. nil means the zero value.
type EtcdOptions struct {
	// Heartbeat and Election are the members' raft timings; default 100ms
	// and 500ms. etcd's least lease TTL is 1.5 × Election (rounded up to
	// whole seconds): the defaults give one second, so tests can use
	// one-second leases.
	Heartbeat, Election time.Duration
	// TLS, if set, makes every member accept TLS client connections only
	// (https client URLs; the members talk to each other in the clear);
	// Etcd.TLS has the clients' files. A test asking for it is skipped on
	// external members (DLOCK_ETCD_ADDR).
	TLS *TLSOptions
	// AuthTokenTTL, if set, is how long an unused simple auth token
	// lives (--auth-token-ttl, whole seconds; etcd's default is 5
	// minutes). A test asking for it is skipped on external members.
	AuthTokenTTL time.Duration
	// MaxTxnOps, if set, is the most operations of a transaction's
	// branch (--max-txn-ops; etcd's default is 128). A test asking for
	// it is skipped on external members.
	MaxTxnOps int
	// MaxRequestBytes, if set, is the largest request a member takes
	// (--max-request-bytes; etcd's default is 1.5 MiB). A test asking for
	// it is skipped on external members.
	MaxRequestBytes int
}

// Etcd is a single etcd member or a three-member cluster. Its hooks act
// on every member; Node(i) acts on one. Committed data survives Restart.
type Etcd struct {
	Group
	// TLS has the PEM files of members started with EtcdOptions.TLS, nil
	// otherwise.
	TLS *TLS
}

// Endpoints returns every member's client URL (http://host:port, or
// https:// with TLS).
func (e *Etcd) Endpoints() []string {
	scheme := "http://"
	if e.TLS != nil {
		scheme = "https://"
	}
	var eps []string
	for _, a := range e.Addrs() {
		eps = append(eps, scheme+a)
	}
	return eps
}

// StartEtcd returns an etcd service for this test alone: the members
// named by DLOCK_ETCD_ADDR (fault hooks unavailable), else a single
// member started by a provider. It fails the test if none can be had,
// and skips it with -short.
func StartEtcd(tb testing.TB, opts *EtcdOptions) *Etcd {
	tb.Helper()
	skipShort(tb)
	if opts != nil && opts.TLS != nil && envAddrs(KindEtcd) != nil {
		tb.Skipf("testserver: the test needs TLS members; %s names some whose TLS the harness does not configure", EnvEtcdAddr)
	}
	if opts != nil && opts.AuthTokenTTL > 0 && envAddrs(KindEtcd) != nil {
		tb.Skipf("testserver: the test needs members with an auth token TTL of its own; %s names some the harness does not configure", EnvEtcdAddr)
	}
	if opts != nil && opts.MaxTxnOps > 0 && envAddrs(KindEtcd) != nil {
		tb.Skipf("testserver: the test needs members with a --max-txn-ops of its own; %s names some the harness does not configure", EnvEtcdAddr)
	}
	if opts != nil && opts.MaxRequestBytes > 0 && envAddrs(KindEtcd) != nil {
		tb.Skipf("testserver: the test needs members with a --max-request-bytes of its own; %s names some the harness does not configure", EnvEtcdAddr)
	}
	e, err := startEtcd(tb, KindEtcd, opts)
	if err != nil {
		tb.Fatal(err)
	}
	return e
}

// StartEtcdCluster is StartEtcd with a three-member cluster on loopback,
// for tests that kill members or the leader.
func StartEtcdCluster(tb testing.TB, opts *EtcdOptions) *Etcd {
	tb.Helper()
	skipShort(tb)
	e, err := startEtcd(tb, KindEtcdCluster, opts)
	if err != nil {
		tb.Fatal(err)
	}
	return e
}

// SharedEtcd returns the test binary's shared single etcd member
// (default options; see SharedRedis for the rules).
func SharedEtcd(tb testing.TB) *Etcd {
	tb.Helper()
	skipShort(tb)
	v, err := sharedGet(tb, KindEtcd, func(lt Lifetime) (any, error) {
		return startEtcd(lt, KindEtcd, nil)
	})
	if err != nil {
		tb.Fatal(err)
	}
	return &Etcd{Group: v.(*Etcd).Group.asShared()}
}

func startEtcd(lt Lifetime, kind Kind, opts *EtcdOptions) (*Etcd, error) {
	if opts == nil {
		opts = &EtcdOptions{}
	}
	if addrs := envAddrs(kind); addrs != nil {
		if opts.TLS != nil {
			return nil, fmt.Errorf("testserver: EtcdOptions.TLS on members from %s", EnvEtcdAddr)
		}
		if opts.AuthTokenTTL > 0 {
			return nil, fmt.Errorf("testserver: EtcdOptions.AuthTokenTTL on members from %s", EnvEtcdAddr)
		}
		if opts.MaxTxnOps > 0 {
			return nil, fmt.Errorf("testserver: EtcdOptions.MaxTxnOps on members from %s", EnvEtcdAddr)
		}
		if opts.MaxRequestBytes > 0 {
			return nil, fmt.Errorf("testserver: EtcdOptions.MaxRequestBytes on members from %s", EnvEtcdAddr)
		}
		return &Etcd{Group: externalGroup(kind, addrs)}, nil
	}
	p, err := pickProvider(kind)
	if err != nil {
		return nil, err
	}
	if kind == KindEtcdCluster {
		return p.EtcdCluster(lt, opts)
	}
	return p.Etcd(lt, opts)
}

// Leader returns the index of the member that leads the cluster, asking
// each member's /v3/maintenance/status (JSON gateway).
func (e *Etcd) Leader() (int, error) {
	ids := make([]string, len(e.Nodes))
	leader := ""
	var errs []error
	for i, n := range e.Nodes {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		id, lead, err := etcdStatus(ctx, n.Addr(), e.TLS.probeConfig())
		cancel()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		ids[i] = id
		if lead != "" && lead != "0" {
			leader = lead
		}
	}
	for i, id := range ids {
		if id != "" && id == leader {
			return i, nil
		}
	}
	return -1, fmt.Errorf("testserver: no etcd leader among %v: %w", e.Addrs(), errors.Join(errs...))
}

// WaitLeader waits up to timeout until a leader is elected and returns
// its index.
func (e *Etcd) WaitLeader(timeout time.Duration) (int, error) {
	deadline := time.Now().Add(timeout)
	for {
		i, err := e.Leader()
		if err == nil || time.Now().After(deadline) {
			return i, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// KillLeader kills the current leader and returns its index.
func (e *Etcd) KillLeader() (int, error) {
	i, err := e.Leader()
	if err != nil {
		return -1, err
	}
	return i, e.Nodes[i].Kill()
}

// etcdStatus asks the member at addr for its id and its leader's id
// (decimal strings, as the JSON gateway writes uint64s).
func etcdStatus(ctx context.Context, addr string, tc *tls.Config) (id, leader string, err error) {
	scheme, client := probeHTTP(tc)
	req, err := http.NewRequestWithContext(ctx, "POST", scheme+addr+"/v3/maintenance/status", strings.NewReader("{}"))
	if err != nil {
		return "", "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return "", "", err
	}
	s := string(b)
	return jsonField(s, "member_id"), jsonField(s, "leader"), nil
}

// jsonField finds "name":"value" (or a bare number) in a flat JSON text.
func jsonField(s, name string) string {
	i := strings.Index(s, `"`+name+`":`)
	if i < 0 {
		return ""
	}
	s = strings.TrimLeft(s[i+len(name)+3:], ` "`)
	end := strings.IndexAny(s, `",}`)
	if end < 0 {
		return ""
	}
	return s[:end]
}

// probeHTTP is the scheme and HTTP client of the probes: over TLS with
// tc, plain when nil.
func probeHTTP(tc *tls.Config) (string, *http.Client) {
	// No keep-alives: a probe leaves no idle connection (and its
	// goroutines) behind, which a goroutine-leak check would count.
	if tc == nil {
		return "http://", &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	}
	return "https://", &http.Client{Transport: &http.Transport{TLSClientConfig: tc, DisableKeepAlives: true}}
}

// etcdHealthy is the readiness probe, over TLS with tc (plain when nil):
// /health says true (a leader is known and the member serves reads).
func etcdHealthy(ctx context.Context, addr string, tc *tls.Config) error {
	scheme, client := probeHTTP(tc)
	req, err := http.NewRequestWithContext(ctx, "GET", scheme+addr+"/health", nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if !strings.Contains(string(b), `"health":"true"`) {
		return fmt.Errorf("%s: not healthy: %s", addr, strings.TrimSpace(string(b)))
	}
	return nil
}

type etcdMember struct {
	name         string
	client, peer int
	dir          string
}

func localEtcd(lt Lifetime, opts *EtcdOptions, members int) (*Etcd, error) {
	t, err := newTLS(lt, opts.TLS)
	if err != nil {
		return nil, err
	}
	root, err := newWorkDir(lt, "etcd")
	if err != nil {
		return nil, err
	}
	e := &Etcd{TLS: t}
	err = startWithRetry(func() error {
		ports, err := FreePorts(2 * members)
		if err != nil {
			return err
		}
		ms := make([]etcdMember, members)
		for i := range ms {
			m := &ms[i]
			m.name = "m" + strconv.Itoa(i+1)
			m.client, m.peer = ports[2*i], ports[2*i+1]
			if m.dir, err = mkdirAll(filepath.Join(root, m.name+"-"+strconv.Itoa(m.client))); err != nil {
				return err
			}
		}
		procs := make([]*process, members)
		for i, m := range ms {
			procs[i] = newEtcdProcess(m, ms, opts, t)
		}
		// Start all at once: a member is healthy only with a quorum.
		errs := make([]error, members)
		var wg sync.WaitGroup
		for i, p := range procs {
			wg.Add(1)
			go func() { defer wg.Done(); errs[i] = launch(lt, p) }()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			for _, p := range procs {
				p.Kill()
			}
			return err
		}
		e.Nodes = nil
		for _, p := range procs {
			e.Nodes = append(e.Nodes, NewServer(p))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return e, nil
}

// etcdArgs are member m's etcd arguments in the cluster all; tp, when
// set, makes its client URL https with those files.
func etcdArgs(m etcdMember, all []etcdMember, opts *EtcdOptions, tp *tlsPaths) []string {
	hb, el := opts.Heartbeat, opts.Election
	if hb <= 0 {
		hb = 100 * time.Millisecond
	}
	if el <= 0 {
		el = 500 * time.Millisecond
	}
	var cluster []string
	for _, o := range all {
		cluster = append(cluster, o.name+"=http://"+hostPort(o.peer))
	}
	client, peer := "http://"+hostPort(m.client), "http://"+hostPort(m.peer)
	var args []string
	if tp != nil {
		client = "https://" + hostPort(m.client)
		args = []string{"--cert-file", tp.cert, "--key-file", tp.key, "--trusted-ca-file", tp.ca}
		if tp.clientAuth {
			args = append(args, "--client-cert-auth")
		}
	}
	if opts.AuthTokenTTL > 0 {
		sec := int64((opts.AuthTokenTTL + time.Second - 1) / time.Second)
		args = append(args, "--auth-token-ttl", strconv.FormatInt(sec, 10))
	}
	if opts.MaxTxnOps > 0 {
		args = append(args, "--max-txn-ops", strconv.Itoa(opts.MaxTxnOps))
	}
	if opts.MaxRequestBytes > 0 {
		args = append(args, "--max-request-bytes", strconv.Itoa(opts.MaxRequestBytes))
	}
	return append(args,
		"--name", m.name,
		"--data-dir", filepath.Join(m.dir, "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", strings.Join(cluster, ","),
		"--initial-cluster-state", "new",
		"--initial-cluster-token", "dlock-test-"+strconv.Itoa(all[0].client),
		"--heartbeat-interval", strconv.FormatInt(hb.Milliseconds(), 10),
		"--election-timeout", strconv.FormatInt(el.Milliseconds(), 10),
		// A killed member keeps what it wrote (the page cache survives
		// the process); only a machine crash would lose it.
		"--unsafe-no-fsync",
		"--logger", "zap", "--log-outputs", "stderr",
		"--enable-v2=false",
	)
}

func newEtcdProcess(m etcdMember, all []etcdMember, opts *EtcdOptions, t *TLS) *process {
	addr := hostPort(m.client)
	var tp *tlsPaths
	if t != nil {
		p := t.hostPaths()
		tp = &p
	}
	return &process{
		name:    "etcd " + addr,
		addr:    addr,
		argv:    append([]string{"etcd"}, etcdArgs(m, all, opts, tp)...),
		dir:     m.dir,
		logPath: filepath.Join(m.dir, "etcd.log"),
		ready:   func(ctx context.Context) error { return etcdHealthy(ctx, addr, t.probeConfig()) },
		timeout: 30 * time.Second,
	}
}
