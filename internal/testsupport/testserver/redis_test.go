package testserver

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func redisClient(t *testing.T, addr string, user, pass string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr: addr, Username: user, Password: pass,
		DialTimeout: 300 * time.Millisecond, ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond,
		MaxRetries: -1,
	})
	t.Cleanup(func() { c.Close() })
	return c
}

func TestRedisFaults(t *testing.T) {
	t.Parallel()
	srv := StartRedis(t, nil)
	srv.RequireFaults(t)
	ctx := context.Background()
	c := redisClient(t, srv.Addr(), "", "")
	must(t, c.Set(ctx, "k", "v", 0).Err())

	must(t, srv.Pause())
	if err := c.Ping(ctx).Err(); !isTimeout(err) {
		t.Fatalf("PING while paused: got %v, want a timeout", err)
	}
	must(t, srv.Resume())
	must(t, c.Ping(ctx).Err())

	must(t, srv.Kill())
	requireRefused(t, srv.Addr())

	must(t, srv.Restart())
	if err := c.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET after restart without persistence: got %v, want redis.Nil", err)
	}

	must(t, srv.Stop())
	requireRefused(t, srv.Addr())
}

func TestRedisPersistence(t *testing.T) {
	t.Parallel()
	srv := StartRedis(t, &RedisOptions{Persistence: true})
	srv.RequireFaults(t)
	ctx := context.Background()
	c := redisClient(t, srv.Addr(), "", "")
	must(t, c.Set(ctx, "k", "v", 0).Err())
	must(t, srv.Kill())
	must(t, srv.Restart())
	if v, err := c.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("GET after kill and restart with persistence: %q, %v; want \"v\"", v, err)
	}
}

func TestRedisACLUser(t *testing.T) {
	t.Parallel()
	srv := StartRedis(t, &RedisOptions{User: "noscripts", ACLRules: []string{"-@scripting"}})
	if srv.Username == "" || srv.Password == "" {
		t.Fatalf("no ACL user: %+v", srv)
	}
	ctx := context.Background()
	c := redisClient(t, srv.Addr(), srv.Username, srv.Password)
	must(t, c.Set(ctx, "k", "v", 0).Err())
	if who, err := c.Do(ctx, "ACL", "WHOAMI").Text(); err != nil || who != srv.Username {
		t.Fatalf("ACL WHOAMI: %q, %v", who, err)
	}
	err := c.Eval(ctx, "return 1", nil).Err()
	if err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("EVAL as %s: got %v, want NOPERM", srv.Username, err)
	}
	bad := redisClient(t, srv.Addr(), srv.Username, "wrong")
	if err := bad.Ping(ctx).Err(); err == nil {
		t.Fatal("wrong password accepted")
	}
}

func TestSharedRedis(t *testing.T) {
	t.Parallel()
	a, b := SharedRedis(t), SharedRedis(t)
	if a.Addr() != b.Addr() {
		t.Fatalf("two shared instances: %s, %s", a.Addr(), b.Addr())
	}
	must(t, redisClient(t, a.Addr(), "", "").Ping(context.Background()).Err())
	if err := a.Pause(); !errors.Is(err, ErrNoFaults) {
		t.Fatalf("Pause on shared instance: got %v, want ErrNoFaults", err)
	}
	if ok, _ := a.Faults(); ok {
		t.Fatal("shared instance claims fault hooks")
	}
}

// A dedicated server is gone once its test has ended.
func TestCleanupKills(t *testing.T) {
	t.Parallel()
	var addr string
	t.Run("inner", func(t *testing.T) {
		srv := StartRedis(t, nil)
		srv.RequireFaults(t)
		addr = srv.Addr()
		must(t, srv.Pause()) // a paused server is killed too
	})
	if addr != "" {
		requireRefused(t, addr)
	}
}

// Not parallel: t.Setenv.
func TestEnvAddress(t *testing.T) {
	skipShort(t)
	shared := SharedRedis(t)
	t.Setenv(EnvBackend, "") // a forced provider would win over the address
	t.Setenv(EnvRedisAddr, shared.Addr())

	srv := StartRedis(t, &RedisOptions{User: "envuser", ACLRules: []string{"-@scripting"}})
	if srv.Addr() != shared.Addr() {
		t.Fatalf("StartRedis with %s=%s returned %s", EnvRedisAddr, shared.Addr(), srv.Addr())
	}
	if err := srv.Kill(); !errors.Is(err, ErrNoFaults) {
		t.Fatalf("Kill on external server: got %v, want ErrNoFaults", err)
	}
	ctx := context.Background()
	c := redisClient(t, srv.Addr(), srv.Username, srv.Password)
	must(t, c.Ping(ctx).Err())
	if err := c.Eval(ctx, "return 1", nil).Err(); err == nil {
		t.Fatal("EVAL allowed for user with -@scripting")
	}
	skipped := false
	t.Run("fault test", func(t *testing.T) {
		defer func() { skipped = t.Skipped() }()
		srv.RequireFaults(t)
	})
	if !skipped {
		t.Fatal("RequireFaults did not skip on an external server")
	}
}

// Not parallel: t.Setenv.
func TestBackendSelection(t *testing.T) {
	t.Setenv(EnvBackend, "podman")
	if _, err := startRedis(t, nil); err == nil || !strings.Contains(err.Error(), "unknown provider") {
		t.Fatalf("%s=podman: got %v", EnvBackend, err)
	}
	// A forced provider that cannot run the kind says why, and never falls
	// back to another one. (.invalid never resolves, with or without a
	// registry.)
	t.Setenv(EnvBackend, "docker")
	t.Setenv(EnvRedisImage, "registry.invalid/dlock/redis:none")
	_, err := startRedis(t, nil)
	if err == nil {
		t.Fatalf("%s=docker with a missing image: started a server", EnvBackend)
	}
	if msg := err.Error(); !strings.Contains(msg, "docker") ||
		!strings.Contains(msg, "make images") && !strings.Contains(msg, "no Docker engine") {
		t.Fatalf("%s=docker with a missing image: got %v, want a hint at make images or the engine", EnvBackend, err)
	}
}
