package testserver

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// MemcachedOptions configures memcached servers. nil means the zero value.
type MemcachedOptions struct {
	// Servers is how many independent servers to start (default 1).
	Servers int
	// MemoryMB is each server's item memory (-m); default 64.
	MemoryMB int
	// NoEvict (-M) makes a full server refuse stores instead of evicting.
	NoEvict bool
	// Args are extra memcached arguments. Ignored for external servers.
	Args []string
	// TLS, if set, makes every server accept TLS connections only (-Z),
	// with certificates from one throwaway CA; Memcached.TLS has the
	// clients' files. A test asking for it is skipped on external servers
	// (DLOCK_MEMCACHED_ADDR).
	TLS *TLSOptions
}

// Memcached is one or more independent memcached servers. Its hooks act on
// all of them; Node(i) acts on one. Memcached keeps nothing across Restart.
type Memcached struct {
	Group
	// TLS has the PEM files of servers started with MemcachedOptions.TLS,
	// nil otherwise.
	TLS *TLS
}

// StartMemcached returns memcached servers for this test alone: the ones
// named by DLOCK_MEMCACHED_ADDR (fault hooks unavailable; the test is skipped
// if it lists fewer than opts.Servers), else ones started by a provider. It
// fails the test if none can be had, and skips it with -short.
func StartMemcached(tb testing.TB, opts *MemcachedOptions) *Memcached {
	tb.Helper()
	skipShort(tb)
	opts = memcachedDefaults(opts)
	if opts.TLS != nil && envAddrs(KindMemcached) != nil {
		tb.Skipf("testserver: the test needs TLS servers; %s names some whose TLS the harness does not configure", EnvMemcachedAddr)
	}
	if addrs := envAddrs(KindMemcached); addrs != nil && len(addrs) < opts.Servers {
		tb.Skipf("testserver: test needs %d memcached servers, %s lists %d", opts.Servers, EnvMemcachedAddr, len(addrs))
	}
	m, err := startMemcached(tb, opts)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// SharedMemcached returns the test binary's shared memcached server (one
// server, default options; see SharedRedis for the rules).
func SharedMemcached(tb testing.TB) *Memcached {
	tb.Helper()
	skipShort(tb)
	v, err := sharedGet(tb, KindMemcached, func(lt Lifetime) (any, error) {
		return startMemcached(lt, memcachedDefaults(nil))
	})
	if err != nil {
		tb.Fatal(err)
	}
	return &Memcached{Group: v.(*Memcached).Group.asShared()}
}

func memcachedDefaults(opts *MemcachedOptions) *MemcachedOptions {
	o := MemcachedOptions{}
	if opts != nil {
		o = *opts
	}
	if o.Servers <= 0 {
		o.Servers = 1
	}
	if o.MemoryMB <= 0 {
		o.MemoryMB = 64
	}
	return &o
}

func startMemcached(lt Lifetime, opts *MemcachedOptions) (*Memcached, error) {
	if addrs := envAddrs(KindMemcached); addrs != nil {
		if opts.TLS != nil {
			return nil, fmt.Errorf("testserver: MemcachedOptions.TLS on servers from %s", EnvMemcachedAddr)
		}
		return &Memcached{Group: externalGroup(KindMemcached, addrs)}, nil
	}
	p, err := pickProvider(KindMemcached)
	if err != nil {
		return nil, err
	}
	return p.Memcached(lt, opts)
}

func localMemcached(lt Lifetime, opts *MemcachedOptions) (*Memcached, error) {
	opts = memcachedDefaults(opts)
	t, err := newTLS(lt, opts.TLS)
	if err != nil {
		return nil, err
	}
	root, err := newWorkDir(lt, "memcached")
	if err != nil {
		return nil, err
	}
	m := &Memcached{TLS: t}
	for i := range opts.Servers {
		dir, err := mkdirAll(filepath.Join(root, "node"+strconv.Itoa(i)))
		if err != nil {
			return nil, err
		}
		err = startWithRetry(func() error {
			port, err := FreePort()
			if err != nil {
				return err
			}
			p := newMemcachedProcess(dir, port, opts, t)
			if err := launch(lt, p); err != nil {
				return err
			}
			m.Nodes = append(m.Nodes, NewServer(p))
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return m, nil
}

// memcachedArgs are memcached's arguments for a server on port, without
// the user to run as and without opts.Args; tp, when set, makes it accept
// TLS connections only, with those files.
func memcachedArgs(port int, opts *MemcachedOptions, tp *tlsPaths) []string {
	args := []string{"-l", "127.0.0.1", "-p", strconv.Itoa(port), "-U", "0",
		"-m", strconv.Itoa(opts.MemoryMB), "-t", "2", "-c", "1024"}
	if opts.NoEvict {
		args = append(args, "-M")
	}
	if tp != nil {
		verify := 0 // none asked for
		if tp.clientAuth {
			verify = 2 // required
		}
		args = append(args, "-Z", "-o", fmt.Sprintf("ssl_chain_cert=%s,ssl_key=%s,ssl_ca_cert=%s,ssl_verify_mode=%d",
			tp.cert, tp.key, tp.ca, verify))
	}
	return args
}

func newMemcachedProcess(dir string, port int, opts *MemcachedOptions, t *TLS) *process {
	addr := hostPort(port)
	var tp *tlsPaths
	if t != nil {
		p := t.hostPaths()
		tp = &p
	}
	argv := append([]string{"memcached"}, memcachedArgs(port, opts, tp)...)
	if os.Geteuid() == 0 {
		// memcached refuses to run as root without naming a user.
		name := "root"
		if u, err := user.Current(); err == nil {
			name = u.Username
		}
		argv = append(argv, "-u", name)
	}
	argv = append(argv, opts.Args...)
	return &process{
		name:    "memcached " + addr,
		addr:    addr,
		argv:    argv,
		dir:     dir,
		logPath: filepath.Join(dir, "memcached.log"),
		ready:   func(ctx context.Context) error { return memcachedVersioner(t.probeConfig())(ctx, addr) },
		timeout: 10 * time.Second,
	}
}

// memcachedVersioner is the readiness probe, over TLS with tc (plain when
// nil): "version" answers "VERSION x".
func memcachedVersioner(tc *tls.Config) func(ctx context.Context, addr string) error {
	return func(ctx context.Context, addr string) error {
		reply, err := textDoTLS(ctx, addr, tc, "version\r\n", func(r string) bool { return strings.HasSuffix(r, "\n") })
		if err != nil {
			return err
		}
		if !strings.HasPrefix(reply, "VERSION ") {
			return fmt.Errorf("version replied %q", reply)
		}
		return nil
	}
}
