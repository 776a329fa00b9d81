package etcd

import (
	"context"
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
)

// TestLoginAfterRestart: a Locker opened from a URL with a user goes on
// granting after its member restarts, which forgets the member's simple
// tokens, and stops for a moment just after (calls made meanwhile meet
// the stale token). etcd's client resends its stale token with the
// Authenticate meant to replace it, which etcd 3.4 refuses, so with the
// client's own log-in every call failed from then on (login).
func TestLoginAfterRestart(t *testing.T) {
	prefix := fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())
	e := authEtcd(t, prefix)
	e.RequireFaults(t)
	ctx := context.Background()
	l, err := lock.Open(ctx, fmt.Sprintf("etcd://app:apppw@%s/%s?ttl=2s", e.Addrs()[0], prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	try := func(key string, d time.Duration) error {
		c, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		lease, err := l.Lock(c, key)
		if err != nil {
			return err
		}
		return lease.Unlock(ctx)
	}
	if err := try("before", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 4 { // calls under way through the restart and the pause
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
				}
				try(fmt.Sprintf("load/%d/%d", g, i), time.Second)
			}
		}()
	}
	step := func(name string, f func() error) {
		if err := f(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	time.Sleep(500 * time.Millisecond)
	step("kill", e.Kill)
	time.Sleep(2 * time.Second)
	step("restart", e.Restart)
	time.Sleep(200 * time.Millisecond)
	step("pause", e.Pause)
	time.Sleep(1500 * time.Millisecond)
	step("resume", e.Resume)
	start := time.Now()
	var last error
	for i := 0; time.Since(start) < 15*time.Second; i++ {
		if last = try(fmt.Sprintf("after/%d", i), 2*time.Second); last == nil {
			t.Logf("granted %v after the member came back", time.Since(start).Round(time.Millisecond))
			break
		}
	}
	close(stop)
	wg.Wait()
	if last != nil {
		t.Fatalf("no grant 15 s after the member came back: %v", last)
	}
}

// TestLoginAuthOff: a URL with a user works on a member without
// authentication (Authenticate's refusal is not an error), and logs in
// once, not at every call.
func TestLoginAuthOff(t *testing.T) {
	e := testserver.StartEtcd(t, nil)
	prefix := fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	u, err := url.Parse(fmt.Sprintf("etcd://someone:pw@%s/%s", e.Addrs()[0], prefix))
	if err != nil {
		t.Fatal(err)
	}
	dd, lo, err := open(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	d := dd.(*etcdDriver)
	l := lock.New(d, lo)
	defer l.Close()
	for i := range 3 {
		lease, err := l.Lock(ctx, fmt.Sprintf("k%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if err := lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, in, gen := d.login.state(); !in || gen != 1 {
		t.Errorf("logged in %v, %d times; want once", in, gen)
	}
}
