package redisnx

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// A failover client (Sentinel) works like a plain one: grants, release
// messages and the shared subscription go to the primary Sentinel names.
func TestSentinel(t *testing.T) {
	primary := testserver.StartRedis(t, nil)
	primary.RequireFaults(t) // a local server: Sentinel is started beside it
	sentinel := startSentinel(t, "dlockprimary", primary.Addr(), nil)
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

// sentinelAuth are the passwords of a Sentinel started by startSentinel:
// Password is the Sentinel's own (requirepass), PrimaryUser and
// PrimaryPassword what it authenticates to the primary with.
type sentinelAuth struct {
	Password, PrimaryUser, PrimaryPassword string
}

// startSentinel runs a Sentinel monitoring the primary at addr under name,
// with the passwords of auth (nil: none), and returns its address.
func startSentinel(t *testing.T, name, addr string, auth *sentinelAuth) string {
	host, port, _ := net.SplitHostPort(addr)
	sport, err := testserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	if auth == nil {
		auth = &sentinelAuth{}
	}
	dir := t.TempDir()
	conf := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor %s %s %s 1\n", sport, dir, name, host, port)
	if auth.Password != "" {
		conf += fmt.Sprintf("requirepass %s\n", auth.Password)
	}
	if auth.PrimaryUser != "" {
		conf += fmt.Sprintf("sentinel auth-user %s %s\n", name, auth.PrimaryUser)
	}
	if auth.PrimaryPassword != "" {
		conf += fmt.Sprintf("sentinel auth-pass %s %s\n", name, auth.PrimaryPassword)
	}
	confPath := filepath.Join(dir, "sentinel.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("redis-server", confPath, "--sentinel")
	// Killed with the test binary, however it ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot start a Sentinel: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	saddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sport))
	s := redis.NewSentinelClient(&redis.Options{Addr: saddr, Password: auth.Password})
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
// makes the same client for rediswatch (internal/testsupport/redismix).
func TestSentinelURL(t *testing.T) {
	primary := testserver.StartRedis(t, nil)
	primary.RequireFaults(t) // a local server: Sentinel is started beside it
	sentinel := startSentinel(t, "dlockprimary", primary.Addr(), nil)
	ctx := tctx(t, 30*time.Second)
	l, err := lock.Open(ctx, "redisnx://"+sentinel+"?master_name=dlockprimary&dial_timeout=2s")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var c *redis.Client
	if !l.As(&c) {
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

// A Sentinel URL's credentials reach the clients they name: the user info
// the Sentinels (go-redis's SentinelUsername and SentinelPassword),
// username= and password= the primary. The primary admits only its ACL
// user, the Sentinel wants its own password, so a URL that mixed them up
// could not lock; a wrong password fails with an error that quotes none.
func TestSentinelURLCredentials(t *testing.T) {
	primary := testserver.StartRedis(t, &testserver.RedisOptions{User: "prim"})
	primary.RequireFaults(t) // a local server: Sentinel is started beside it
	ctx := tctx(t, 60*time.Second)
	raw := redis.NewClient(&redis.Options{Addr: primary.Addr(), Username: primary.Username, Password: primary.Password})
	defer raw.Close()
	// Only the ACL user may connect: the default user is off.
	if err := raw.Do(ctx, "ACL", "SETUSER", "default", "off").Err(); err != nil {
		t.Fatal(err)
	}
	const sentinelPW = "sentinel-pw-4f1c"
	sentinel := startSentinel(t, "dlockprimary", primary.Addr(),
		&sentinelAuth{Password: sentinelPW, PrimaryUser: primary.Username, PrimaryPassword: primary.Password})
	sentinelURL := func(sentinelPW, primaryPW string) string {
		return fmt.Sprintf("redisnx://:%s@%s?master_name=dlockprimary&username=%s&password=%s&dial_timeout=2s",
			url.QueryEscape(sentinelPW), sentinel, url.QueryEscape(primary.Username), url.QueryEscape(primaryPW))
	}

	l, err := lock.Open(ctx, sentinelURL(sentinelPW, primary.Password))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lease, err := l.TryLock(ctx, testKey(t))
	if err != nil {
		t.Fatalf("TryLock through a Sentinel URL with both credentials: %v", err)
	}
	if owner := raw.Get(ctx, lockKey(DefaultPrefix, lease.Key())).Val(); len(owner) != 32 {
		t.Errorf("the grant is not on the primary: %q", owner)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	const wrong = "wrong-pw-9d2e"
	for _, tc := range []struct{ name, url, want string }{
		{"the primary's password wrong", sentinelURL(sentinelPW, wrong), "WRONGPASS"},
		{"the Sentinel's password wrong", sentinelURL(wrong, primary.Password), "WRONGPASS"},
	} {
		l, err := lock.Open(ctx, tc.url)
		if err == nil {
			_, err = l.TryLock(tctx(t, 5*time.Second), testKey(t))
			l.Close()
		}
		if err == nil {
			t.Errorf("%s: locked", tc.name)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, tc.want) {
			t.Errorf("%s: %v; want an error saying %s", tc.name, err, tc.want)
		}
		for _, pw := range []string{sentinelPW, primary.Password, wrong} {
			if strings.Contains(msg, pw) {
				t.Errorf("%s: the error quotes the password %q: %v", tc.name, pw, err)
			}
		}
	}
}
