package testserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// ZooKeeperOptions configures ZooKeeper servers. nil means the zero value.
type ZooKeeperOptions struct {
	// TickTime is ZooKeeper's time unit; default 500ms. The server clamps a
	// client's session timeout to [MinSessionTimeout, MaxSessionTimeout],
	// which default to 2 and 20 ticks (1s and 10s), so tests can use short
	// sessions.
	TickTime                             time.Duration
	MinSessionTimeout, MaxSessionTimeout time.Duration
	// TLS, if set, makes every server accept TLS connections only: its
	// client port is a secureClientPort (NettyServerCnxnFactory, PEM key
	// and trust stores) and there is no plain one; ZooKeeper.TLS has the
	// clients' files. The ensemble's peers still talk in the clear. A test
	// asking for it is skipped on external servers (DLOCK_ZOOKEEPER_ADDR).
	TLS *TLSOptions
}

// ZooKeeper is a standalone ZooKeeper server or an ensemble. Its hooks act
// on every node; Node(i) acts on one. Committed data survives Restart.
type ZooKeeper struct {
	Group
	// TLS has the PEM files of servers started with ZooKeeperOptions.TLS,
	// nil otherwise.
	TLS *TLS
}

// StartZooKeeper returns a ZooKeeper service for this test alone: the
// servers named by DLOCK_ZOOKEEPER_ADDR (fault hooks unavailable), else a
// standalone server started by a provider. It fails the test if none can be
// had, and skips it with -short.
func StartZooKeeper(tb testing.TB, opts *ZooKeeperOptions) *ZooKeeper {
	tb.Helper()
	skipShort(tb)
	skipExternalTLS(tb, KindZooKeeper, opts)
	z, err := startZooKeeper(tb, KindZooKeeper, opts)
	if err != nil {
		tb.Fatal(err)
	}
	return z
}

// StartZooKeeperEnsemble is StartZooKeeper with a three-server ensemble on
// loopback, for tests that kill the leader.
func StartZooKeeperEnsemble(tb testing.TB, opts *ZooKeeperOptions) *ZooKeeper {
	tb.Helper()
	skipShort(tb)
	skipExternalTLS(tb, KindZooKeeperEnsemble, opts)
	z, err := startZooKeeper(tb, KindZooKeeperEnsemble, opts)
	if err != nil {
		tb.Fatal(err)
	}
	return z
}

// SharedZooKeeper returns the test binary's shared standalone ZooKeeper
// server (default options; see SharedRedis for the rules).
func SharedZooKeeper(tb testing.TB) *ZooKeeper {
	tb.Helper()
	skipShort(tb)
	v, err := sharedGet(tb, KindZooKeeper, func(lt Lifetime) (any, error) {
		return startZooKeeper(lt, KindZooKeeper, nil)
	})
	if err != nil {
		tb.Fatal(err)
	}
	return &ZooKeeper{Group: v.(*ZooKeeper).Group.asShared()}
}

func startZooKeeper(lt Lifetime, kind Kind, opts *ZooKeeperOptions) (*ZooKeeper, error) {
	if opts == nil {
		opts = &ZooKeeperOptions{}
	}
	if addrs := envAddrs(kind); addrs != nil {
		if opts.TLS != nil {
			return nil, fmt.Errorf("testserver: ZooKeeperOptions.TLS on servers from %s", EnvZooKeeperAddr)
		}
		return &ZooKeeper{Group: externalGroup(kind, addrs)}, nil
	}
	p, err := pickProvider(kind)
	if err != nil {
		return nil, err
	}
	if kind == KindZooKeeperEnsemble {
		return p.ZooKeeperEnsemble(lt, opts)
	}
	return p.ZooKeeper(lt, opts)
}

func skipExternalTLS(tb testing.TB, kind Kind, opts *ZooKeeperOptions) {
	tb.Helper()
	if opts != nil && opts.TLS != nil && envAddrs(kind) != nil {
		tb.Skipf("testserver: the test needs TLS servers; %s names some whose TLS the harness does not configure", EnvZooKeeperAddr)
	}
}

// Leader returns the index of the node that leads the ensemble (for a
// standalone server: 0), asking each node with the srvr command.
func (z *ZooKeeper) Leader() (int, error) {
	var errs []error
	for i, n := range z.Nodes {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		mode, err := zkModeTLS(ctx, n.Addr(), z.TLS.probeConfig())
		cancel()
		if mode == "leader" || mode == "standalone" {
			return i, nil
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return -1, fmt.Errorf("testserver: no ZooKeeper leader among %v: %w", z.Addrs(), errors.Join(errs...))
}

// WaitLeader waits up to timeout until a leader is elected and returns its
// index.
func (z *ZooKeeper) WaitLeader(timeout time.Duration) (int, error) {
	deadline := time.Now().Add(timeout)
	for {
		i, err := z.Leader()
		if err == nil || time.Now().After(deadline) {
			return i, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// KillLeader kills the current leader and returns its index. The others
// elect a new leader (see WaitLeader); Node(i).Restart brings it back.
func (z *ZooKeeper) KillLeader() (int, error) {
	i, err := z.Leader()
	if err != nil {
		return -1, err
	}
	return i, z.Nodes[i].Kill()
}

// zkMode asks addr for its srvr output and returns the Mode line's value:
// standalone, leader or follower once the node serves clients. (ruok
// answers imok before that, so it is not a readiness probe.)
func zkMode(ctx context.Context, addr string) (string, error) {
	return zkModeTLS(ctx, addr, nil)
}

// zkModeTLS is zkMode over TLS with tc (plain when nil).
func zkModeTLS(ctx context.Context, addr string, tc *tls.Config) (string, error) {
	out, err := textDoTLS(ctx, addr, tc, "srvr", nil)
	for _, line := range strings.Split(out, "\n") {
		if mode, ok := strings.CutPrefix(line, "Mode: "); ok {
			return strings.TrimSpace(mode), nil
		}
	}
	if err == nil {
		err = fmt.Errorf("%s: not serving: %q", addr, strings.TrimSpace(out))
	}
	return "", err
}

// zkServer is the readiness probe, over TLS with tc (plain when nil): the
// server answers srvr with a mode (standalone, leader or follower).
func zkServer(tc *tls.Config) func(ctx context.Context, addr string) error {
	return func(ctx context.Context, addr string) error {
		_, err := zkModeTLS(ctx, addr, tc)
		return err
	}
}

type zkNode struct {
	id                     int
	client, peer, election int
	dir                    string
}

func localZooKeeper(lt Lifetime, opts *ZooKeeperOptions, servers int) (*ZooKeeper, error) {
	java, cp, err := zkJava()
	if err != nil {
		return nil, err
	}
	t, err := newTLS(lt, opts.TLS)
	if err != nil {
		return nil, err
	}
	root, err := newWorkDir(lt, "zookeeper")
	if err != nil {
		return nil, err
	}
	z := &ZooKeeper{TLS: t}
	err = startWithRetry(func() error {
		ports, err := FreePorts(3 * servers)
		if err != nil {
			return err
		}
		nodes := make([]zkNode, servers)
		for i := range nodes {
			n := &nodes[i]
			n.id = i + 1
			n.client, n.peer, n.election = ports[3*i], ports[3*i+1], ports[3*i+2]
			if n.dir, err = mkdirAll(filepath.Join(root, "node"+strconv.Itoa(n.id)+"-"+strconv.Itoa(n.client))); err != nil {
				return err
			}
		}
		procs := make([]*process, servers)
		for i, n := range nodes {
			if procs[i], err = newZooKeeperProcess(java, cp, n, nodes, opts, t); err != nil {
				return err
			}
		}
		// Start all at once: an ensemble node is ready only with a quorum.
		errs := make([]error, servers)
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
		z.Nodes = nil
		for _, p := range procs {
			z.Nodes = append(z.Nodes, NewServer(p))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return z, nil
}

func newZooKeeperProcess(java, cp string, n zkNode, all []zkNode, opts *ZooKeeperOptions, t *TLS) (*process, error) {
	dataDir := filepath.Join(n.dir, "data")
	if _, err := mkdirAll(dataDir); err != nil {
		return nil, err
	}
	if len(all) > 1 {
		if err := os.WriteFile(filepath.Join(dataDir, "myid"), []byte(strconv.Itoa(n.id)+"\n"), 0o644); err != nil {
			return nil, fmt.Errorf("testserver: %w", err)
		}
	}
	cfgPath := filepath.Join(n.dir, "zoo.cfg")
	var tp *tlsPaths
	if t != nil {
		p := t.hostPaths()
		tp = &p
	}
	if err := os.WriteFile(cfgPath, []byte(zkConfig(n, all, opts, dataDir, tp)), 0o644); err != nil {
		return nil, fmt.Errorf("testserver: %w", err)
	}
	addr := hostPort(n.client)
	argv := append([]string{java}, zkJVMFlags(n.dir)...)
	argv = append(argv, "-cp", cp, "org.apache.zookeeper.server.quorum.QuorumPeerMain", cfgPath)
	return &process{
		name:    "zookeeper " + addr,
		addr:    addr,
		argv:    argv,
		dir:     n.dir,
		logPath: filepath.Join(n.dir, "zookeeper.log"),
		ready:   func(ctx context.Context) error { return zkServer(t.probeConfig())(ctx, addr) },
		timeout: 60 * time.Second,
	}, nil
}

// zkConfig is node n's zoo.cfg; all lists the ensemble (one node:
// standalone). An ensemble node also needs dataDir/myid. With tp, the
// client port is a secure one with those files, and there is no plain one.
func zkConfig(n zkNode, all []zkNode, opts *ZooKeeperOptions, dataDir string, tp *tlsPaths) string {
	tick := opts.TickTime
	if tick <= 0 {
		tick = 500 * time.Millisecond
	}
	var b strings.Builder
	fmt.Fprintf(&b, "tickTime=%d\ninitLimit=10\nsyncLimit=5\n", tick.Milliseconds())
	if tp == nil {
		fmt.Fprintf(&b, "dataDir=%s\nclientPort=%d\nclientPortAddress=127.0.0.1\n", dataDir, n.client)
	} else {
		auth := "none"
		if tp.clientAuth {
			auth = "need"
		}
		fmt.Fprintf(&b, "dataDir=%s\nsecureClientPort=%d\nsecureClientPortAddress=127.0.0.1\n", dataDir, n.client)
		b.WriteString("serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n")
		fmt.Fprintf(&b, "ssl.keyStore.location=%s\nssl.keyStore.type=PEM\n", tp.keyStore)
		fmt.Fprintf(&b, "ssl.trustStore.location=%s\nssl.trustStore.type=PEM\n", tp.ca)
		fmt.Fprintf(&b, "ssl.clientAuth=%s\n", auth)
	}
	b.WriteString("admin.enableServer=false\n4lw.commands.whitelist=*\nmaxClientCnxns=0\n")
	// Without fsync a killed server still keeps what it wrote (the page cache
	// survives the process); only a machine crash would lose it.
	b.WriteString("forceSync=no\npreAllocSize=1024\ncnxTimeout=1000\n")
	if opts.MinSessionTimeout > 0 {
		fmt.Fprintf(&b, "minSessionTimeout=%d\n", opts.MinSessionTimeout.Milliseconds())
	}
	if opts.MaxSessionTimeout > 0 {
		fmt.Fprintf(&b, "maxSessionTimeout=%d\n", opts.MaxSessionTimeout.Milliseconds())
	}
	if len(all) > 1 {
		for _, o := range all {
			fmt.Fprintf(&b, "server.%d=127.0.0.1:%d:%d\n", o.id, o.peer, o.election)
		}
	}
	return b.String()
}

// zkJVMFlags are the JVM options of a ZooKeeper server whose temporary
// files go to tmpDir.
func zkJVMFlags(tmpDir string) []string {
	return []string{
		"-Xmx256m", "-Xms16m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-XX:-UsePerfData", "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true",
		"-Djava.io.tmpdir=" + tmpDir,
		"-Dzookeeper.admin.enableServer=false",
		// Empty container nodes (lock parents) go after 1s, not 60s.
		"-Dznode.container.checkIntervalMs=1000",
		"-Dorg.slf4j.simpleLogger.showDateTime=true",
		"-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
	}
}
