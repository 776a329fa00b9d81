package nemesis

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock/harness/chaos"
	"github.com/dlock-go/dlock/lock"
)

// TestEtcdAuthRestart: with etcd's authentication on, a Locker logged in
// before a member restart (which forgets its simple tokens) must go on
// granting free keys after it, within the run's recovery.
func TestEtcdAuthRestart(t *testing.T) {
	srv := chaos.StartServer(t, chaos.EtcdBackend, chaos.ServerOptions{})
	if err := etcdAuth(srv); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lk, err := lock.Open(ctx, fmt.Sprintf(etcdURL, srv.Addrs[0]))
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	held, err := lk.Lock(ctx, "held", lock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	go func() { // a waiter during the outage
		c, cancel := context.WithTimeout(ctx, 6*time.Second)
		defer cancel()
		lk.Lock(c, "held")
	}()
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(8 * time.Second) // Lockers' calls fail meanwhile
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := 0; ; i++ {
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		l, err := lk.Lock(c, fmt.Sprintf("free/%d", i))
		cancel()
		if err == nil {
			l.Unlock(ctx)
			t.Logf("granted %v after the restart (try %d)", time.Since(start), i+1)
			break
		}
		if time.Since(start) > 15*time.Second {
			t.Fatalf("no free key granted %v after the restart: %v", time.Since(start), err)
		}
		t.Logf("try %d: %v", i+1, err)
	}
	held.Unlock(ctx)
}
