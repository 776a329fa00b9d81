package rediswatch

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/redis/go-redis/v9"
)

// TestAudit44ForgedNamedWake attacks the one-round-trip claim (claim.go),
// which runs after a message that names the waiter: a client allowed to
// publish and nothing else sends the queued waiter's name on its inbox
// over and over while another client holds the key. Each message costs
// the waiter a claim, which reads the key another's and grants nothing;
// the holder keeps the key, and the waiter is still granted at the
// release.
func TestAudit44ForgedNamedWake(t *testing.T) {
	srv := testserver.SharedRedis(t)
	admin := standalone(t)
	ctx := testCtx(t)
	const user, pass = "audit44-pub", "audit44-pub-pass"
	if err := admin.Do(ctx, "acl", "setuser", user, "reset", "on", ">"+pass, "resetchannels", "&*", "+publish", "+hello", "+auth", "+ping").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Do(context.Background(), "acl", "deluser", user) })
	pub := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: user, Password: pass})
	t.Cleanup(func() { pub.Close() })
	if err := pub.Set(ctx, "x", "1", 0).Err(); err == nil {
		t.Fatal("the publishing user may write keys")
	}

	holderL, _ := newTestLocker(t, standalone(t), nil)
	waiterL, waiterD := newTestLocker(t, standalone(t), nil)
	key := testKey(t)
	lk := redisx.LockKey(DefaultPrefix, key)
	held, err := holderL.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		token uint64
		err   error
	}
	got := make(chan result, 1)
	go func() {
		l, err := waiterL.Lock(ctx, key)
		if err != nil {
			got <- result{err: err}
			return
		}
		got <- result{token: l.Token()}
		l.Unlock(context.Background())
	}()
	var owner, inbox string
	deadline := time.Now().Add(10 * time.Second)
	for owner == "" {
		if time.Now().After(deadline) {
			t.Fatal("the waiter did not queue within 10s")
		}
		time.Sleep(5 * time.Millisecond)
		if q := admin.LRange(ctx, waitQueue(lk), 0, 0).Val(); len(q) == 1 {
			owner, inbox = splitElem(q[0])
		}
	}
	for i := 0; i < 50; i++ {
		if inbox != "" {
			if err := pub.Publish(ctx, inbox, owner).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if err := pub.Publish(ctx, lk+channelSuffix, owner).Err(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case r := <-got:
		t.Fatalf("the waiter returned (token %d, %v) on forged messages while the key was held", r.token, r.err)
	case <-time.After(300 * time.Millisecond):
	}
	if v := admin.Get(ctx, lk).Val(); v == owner || v == "" {
		t.Fatalf("lock key holds %q after the forged messages", v)
	}
	if s := stats(t, waiterL); s.Claims != 0 {
		t.Errorf("Stats.Claims = %d after forged messages", s.Claims)
	}
	_ = waiterD
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.token <= held.Token() {
			t.Errorf("waiter's token %d not above the holder's %d", r.token, held.Token())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not granted within 5s of the release")
	}
}
