package testserver

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// RedisOptions configures a single Redis server. nil means the zero value.
type RedisOptions struct {
	// Persistence turns on the append-only file, fsynced on every write, so
	// data survives Kill and Restart. Off (the default) there is neither AOF
	// nor RDB snapshot, and a restarted server is empty.
	Persistence bool

	// User, if set, creates an ACL user with this name and Password (random
	// when empty) whose rules are "on ~* &* +@all" followed by ACLRules,
	// e.g. []string{"-@scripting"}. The default user stays passwordless. On
	// an external server (DLOCK_REDIS_ADDR) the user is created with ACL
	// SETUSER under a unique name and deleted at cleanup.
	User     string
	Password string
	ACLRules []string

	// Args are extra redis-server arguments, e.g. "--maxmemory", "10mb".
	// Ignored for external servers.
	Args []string

	// TLS, if set, makes the server accept TLS connections only (port 0,
	// tls-port), with a throwaway CA; Redis.TLS has the clients' files.
	// A test asking for it is skipped on an external server
	// (DLOCK_REDIS_ADDR), whose TLS the harness does not configure.
	TLS *TLSOptions
}

// Redis is a single Redis server.
type Redis struct {
	*Server
	// Username and Password of the ACL user from RedisOptions.User; empty
	// when none was asked for.
	Username, Password string
	// TLS has the PEM files of a server started with RedisOptions.TLS,
	// nil otherwise.
	TLS *TLS
}

// StartRedis returns a Redis server for this test alone: the one named by
// DLOCK_REDIS_ADDR (fault hooks unavailable, Persistence and Args not
// applied), else one started by a provider and stopped at the end of the
// test. It fails the test if no server can be had, and skips it with -short.
func StartRedis(tb testing.TB, opts *RedisOptions) *Redis {
	tb.Helper()
	skipShort(tb)
	if opts != nil && opts.TLS != nil && envAddrs(KindRedis) != nil {
		tb.Skipf("testserver: the test needs a TLS server; %s names one whose TLS the harness does not configure", EnvRedisAddr)
	}
	r, err := startRedis(tb, opts)
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

// SharedRedis returns the test binary's shared Redis server (default
// options, no ACL user), started on first use and stopped by Main. Tests
// sharing it must use distinct keys and must not inject faults: its hooks
// return ErrNoFaults.
func SharedRedis(tb testing.TB) *Redis {
	tb.Helper()
	skipShort(tb)
	v, err := sharedGet(tb, KindRedis, func(lt Lifetime) (any, error) { return startRedis(lt, nil) })
	if err != nil {
		tb.Fatal(err)
	}
	r := *v.(*Redis)
	r.Server = r.Server.asShared()
	return &r
}

func startRedis(lt Lifetime, opts *RedisOptions) (*Redis, error) {
	if opts == nil {
		opts = &RedisOptions{}
	}
	if addrs := envAddrs(KindRedis); addrs != nil {
		if opts.TLS != nil {
			return nil, fmt.Errorf("testserver: RedisOptions.TLS on a server from %s", EnvRedisAddr)
		}
		return externalRedis(lt, addrs[0], opts)
	}
	p, err := pickProvider(KindRedis)
	if err != nil {
		return nil, err
	}
	return p.Redis(lt, opts)
}

func externalRedis(lt Lifetime, addr string, opts *RedisOptions) (*Redis, error) {
	r := &Redis{Server: ExternalServer(addr, "address from "+EnvRedisAddr)}
	if opts.User == "" {
		return r, nil
	}
	r.Username = opts.User + "-" + randomHex(4)
	r.Password = opts.Password
	if r.Password == "" {
		r.Password = randomHex(12)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	args := append([]string{"ACL", "SETUSER", r.Username}, aclRules(r.Password, opts.ACLRules)...)
	if _, err := respDo(ctx, addr, args...); err != nil {
		return nil, fmt.Errorf("testserver: create ACL user on %s (%s): %w", addr, EnvRedisAddr, err)
	}
	lt.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		respDo(ctx, addr, "ACL", "DELUSER", r.Username)
	})
	return r, nil
}

func aclRules(password string, extra []string) []string {
	return append([]string{"reset", "on", ">" + password, "~*", "&*", "+@all"}, extra...)
}

// localRedis starts redis-server with a redis.conf in a fresh directory.
func localRedis(lt Lifetime, opts *RedisOptions) (*Redis, error) {
	r, err := newRedisUser(opts)
	if err != nil {
		return nil, err
	}
	if r.TLS, err = newTLS(lt, opts.TLS); err != nil {
		return nil, err
	}
	dir, err := newWorkDir(lt, "redis")
	if err != nil {
		return nil, err
	}
	err = startWithRetry(func() error {
		port, err := FreePort()
		if err != nil {
			return err
		}
		conf := redisBaseConf(port, dir, opts.Persistence) + r.userConf(opts)
		if r.TLS != nil {
			conf += redisTLSConf(port, r.TLS.hostPaths())
		}
		p, err := newRedisProcess(dir, port, conf, opts.Args, redisPinger(r.TLS.probeConfig()))
		if err != nil {
			return err
		}
		r.Server = NewServer(p)
		return launch(lt, p)
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// newRedisUser returns a Redis with the ACL user opts asks for (a random
// password if none is given), or an error if the user, password or rules
// cannot be written into redis.conf.
func newRedisUser(opts *RedisOptions) (*Redis, error) {
	r := &Redis{Username: opts.User, Password: opts.Password}
	if r.Username != "" && r.Password == "" {
		r.Password = randomHex(12)
	}
	for _, rule := range append(opts.ACLRules, r.Username, r.Password) {
		if strings.ContainsAny(rule, " \t\r\n\"'") {
			return nil, fmt.Errorf("testserver: redis ACL user, password and rules must not contain spaces or quotes: %q", rule)
		}
	}
	return r, nil
}

// userConf is the redis.conf line creating r's ACL user, or "".
func (r *Redis) userConf(opts *RedisOptions) string {
	if r.Username == "" {
		return ""
	}
	return "user " + r.Username + " " + strings.Join(aclRules(r.Password, opts.ACLRules), " ") + "\n"
}

func redisBaseConf(port int, dir string, persistence bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "bind 127.0.0.1\nport %d\ndir %q\ndaemonize no\nlogfile \"\"\n", port, dir)
	b.WriteString("save \"\"\nappendfsync always\nenable-debug-command local\n")
	if persistence {
		b.WriteString("appendonly yes\n")
	} else {
		b.WriteString("appendonly no\n")
	}
	return b.String()
}

// redisTLSConf moves a server's clients from port to tls-port (the same
// number) and gives it the TLS files.
func redisTLSConf(port int, p tlsPaths) string {
	auth := "no"
	if p.clientAuth {
		auth = "yes"
	}
	return fmt.Sprintf("port 0\ntls-port %d\ntls-cert-file %q\ntls-key-file %q\ntls-ca-cert-file %q\ntls-auth-clients %s\n",
		port, p.cert, p.key, p.ca, auth)
}

// newRedisProcess writes conf as redis.conf in dir and returns the process
// (not yet started); ready is called with the node's address.
func newRedisProcess(dir string, port int, conf string, args []string, ready func(ctx context.Context, addr string) error) (*process, error) {
	confPath := filepath.Join(dir, "redis.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return nil, fmt.Errorf("testserver: %w", err)
	}
	addr := hostPort(port)
	return &process{
		name:    "redis-server " + addr,
		addr:    addr,
		argv:    append([]string{"redis-server", confPath}, args...),
		dir:     dir,
		logPath: filepath.Join(dir, "redis.log"),
		ready:   func(ctx context.Context) error { return ready(ctx, addr) },
		timeout: 15 * time.Second,
	}, nil
}

// redisPing is the readiness probe: PING answers PONG (not LOADING).
func redisPing(ctx context.Context, addr string) error { return redisPinger(nil)(ctx, addr) }

// redisPinger is redisPing over TLS with tc (plain when nil).
func redisPinger(tc *tls.Config) func(ctx context.Context, addr string) error {
	return func(ctx context.Context, addr string) error {
		reply, err := respDoTLS(ctx, addr, tc, "PING")
		if err != nil {
			return err
		}
		if reply != "PONG" {
			return fmt.Errorf("PING replied %q", reply)
		}
		return nil
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func skipShort(tb testing.TB) {
	tb.Helper()
	if testing.Short() {
		tb.Skip("testserver: -short skips tests that need a real server")
	}
}
