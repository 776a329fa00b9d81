package redisnx

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// A failover client (Sentinel) works like a plain one: grants, release
// messages and the shared subscription go to the primary Sentinel names.
func TestSentinel(t *testing.T) {
	primary := testserver.StartRedis(t, nil)
	primary.RequireFaults(t) // a local server: Sentinel is started beside it
	sentinel := startSentinel(t, "dlockprimary", primary.Addr())
	newClient := func() *redis.Client {
		c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "dlockprimary", SentinelAddrs: []string{sentinel}})
		t.Cleanup(func() { c.Close() })
		return c
	}
	holder := newTestLocker(t, newClient(), nil)
	waiter := newTestLocker(t, newClient(), nil)
	ctx := tctx(t, 30*time.Second)
	k := testKey(t)
	held, err := holder.TryLock(ctx, k)
	if err != nil {
		t.Fatalf("TryLock through Sentinel: %v", err)
	}
	if _, err := waiter.TryLock(ctx, k); !isNotAcquired(err) {
		t.Fatalf("second TryLock: %v, want ErrNotAcquired", err)
	}
	done := make(chan error, 1)
	go func() {
		l, err := waiter.Lock(ctx, k, lock.WithRetry(lock.LinearBackoff(time.Minute)))
		if err == nil {
			err = l.Unlock(ctx)
		}
		done <- err
	}()
	raw := redis.NewClient(&redis.Options{Addr: primary.Addr()})
	defer raw.Close()
	ch := lockKey(DefaultPrefix, k) + channelSuffix
	if !eventually(5*time.Second, func() bool { return raw.PubSubNumSub(ctx, ch).Val()[ch] == 1 }) {
		t.Fatalf("the waiter did not subscribe on the primary")
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("waiter: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("waiter not woken by the release")
	}
}

// startSentinel runs a Sentinel monitoring the primary at addr under name,
// and returns its address.
func startSentinel(t *testing.T, name, addr string) string {
	host, port, _ := net.SplitHostPort(addr)
	sport, err := testserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, "port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor %s %s %s 1\n", sport, dir, name, host, port), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("redis-server", conf, "--sentinel")
	// Killed with the test binary, however it ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot start a Sentinel: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	saddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sport))
	s := redis.NewSentinelClient(&redis.Options{Addr: saddr})
	defer s.Close()
	if !eventually(10*time.Second, func() bool {
		a, err := s.GetMasterAddrByName(tctx(t, time.Second), name).Result()
		return err == nil && len(a) == 2
	}) {
		t.Fatalf("Sentinel at %s does not know %s", saddr, name)
	}
	return saddr
}

// A Sentinel URL (go-redis's convention: the hosts are the Sentinels,
// master_name names the primary) opens a failover client that works, and
// makes the same client for rediswatch (internal/redismix).
func TestSentinelURL(t *testing.T) {
	primary := testserver.StartRedis(t, nil)
	primary.RequireFaults(t) // a local server: Sentinel is started beside it
	sentinel := startSentinel(t, "dlockprimary", primary.Addr())
	ctx := tctx(t, 30*time.Second)
	l, err := lock.Open(ctx, "redisnx://"+sentinel+"?master_name=dlockprimary&dial_timeout=2s")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var c *redis.Client
	if !lock.As(l, &c) {
		t.Fatal("As(*redis.Client) failed for a failover client")
	}
	lease, err := l.TryLock(ctx, testKey(t))
	if err != nil {
		t.Fatalf("TryLock through a Sentinel URL: %v", err)
	}
	raw := redis.NewClient(&redis.Options{Addr: primary.Addr()})
	defer raw.Close()
	if owner := raw.Get(ctx, lockKey(DefaultPrefix, lease.Key())).Val(); len(owner) != 32 {
		t.Errorf("the grant is not on the primary the Sentinel names: %q", owner)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
