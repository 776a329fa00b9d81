package testserver

import (
	"context"
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
}

// Memcached is one or more independent memcached servers. Its hooks act on
// all of them; Node(i) acts on one. Memcached keeps nothing across Restart.
type Memcached struct {
	Group
}

// StartMemcached returns memcached servers for this test alone: the ones
// named by DLOCK_MEMCACHED_ADDR (fault hooks unavailable; the test is skipped
// if it lists fewer than opts.Servers), else ones started by a provider. It
// fails the test if none can be had, and skips it with -short.
func StartMemcached(tb testing.TB, opts *MemcachedOptions) *Memcached {
	tb.Helper()
	skipShort(tb)
	opts = memcachedDefaults(opts)
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
	root, err := newWorkDir(lt, "memcached")
	if err != nil {
		return nil, err
	}
	m := &Memcached{}
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
			p := newMemcachedProcess(dir, port, opts)
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
// the user to run as and without opts.Args.
func memcachedArgs(port int, opts *MemcachedOptions) []string {
	args := []string{"-l", "127.0.0.1", "-p", strconv.Itoa(port), "-U", "0",
		"-m", strconv.Itoa(opts.MemoryMB), "-t", "2", "-c", "1024"}
	if opts.NoEvict {
		args = append(args, "-M")
	}
	return args
}

func newMemcachedProcess(dir string, port int, opts *MemcachedOptions) *process {
	addr := hostPort(port)
	argv := append([]string{"memcached"}, memcachedArgs(port, opts)...)
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
		ready:   func(ctx context.Context) error { return memcachedVersion(ctx, addr) },
		timeout: 10 * time.Second,
	}
}

// memcachedVersion is the readiness probe: "version" answers "VERSION x".
func memcachedVersion(ctx context.Context, addr string) error {
	reply, err := textDo(ctx, addr, "version\r\n", func(r string) bool { return strings.HasSuffix(r, "\n") })
	if err != nil {
		return err
	}
	if !strings.HasPrefix(reply, "VERSION ") {
		return fmt.Errorf("version replied %q", reply)
	}
	return nil
}
