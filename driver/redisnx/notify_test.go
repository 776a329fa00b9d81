package redisnx

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redisx"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// Waiters of one Locker share one pub/sub connection however many keys they
// wait on, and it is gone after Close.
func TestOneSubscriptionPerLocker(t *testing.T) {
	name := fmt.Sprintf("redisnx-subs-%d", time.Now().UnixNano())
	admin := sharedClient(t, nil)
	holder := newTestLocker(t, sharedClient(t, nil), nil)
	waiter := New(sharedClient(t, &redis.Options{ClientName: name}), nil)
	defer waiter.Close()
	ctx := tctx(t, 30*time.Second)
	base := testKey(t)

	// Ten keys, with a second waiter on each of the first five.
	var keys []string
	var held []*lock.Lease
	for i := range 10 {
		k := fmt.Sprintf("%s/%d", base, i)
		l, err := holder.TryLock(ctx, k)
		if err != nil {
			t.Fatalf("TryLock: %v", err)
		}
		keys, held = append(keys, k), append(held, l)
	}
	slow := lock.WithRetry(lock.LinearBackoff(time.Minute)) // only a release message wakes them in time
	var wg sync.WaitGroup
	got := make(chan string, 15)
	for i := range 15 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := waiter.Lock(ctx, keys[i%10], slow)
			if err != nil {
				t.Errorf("waiter on %s: %v", keys[i%10], err)
				return
			}
			got <- keys[i%10]
			l.Unlock(ctx)
		}()
	}
	channels := make([]string, len(keys))
	for i, k := range keys {
		channels[i] = lockKey(DefaultPrefix, k) + channelSuffix
	}
	if !eventually(5*time.Second, func() bool {
		subs, err := admin.PubSubNumSub(ctx, channels...).Result()
		if err != nil {
			return false
		}
		for _, n := range subs {
			if n != 1 {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("not every channel has one subscriber: %v", admin.PubSubNumSub(ctx, channels...).Val())
	}
	if ids := pubsubClients(t, admin, name); len(ids) != 1 {
		t.Errorf("%d pub/sub connections for 15 waiters on 10 keys, want 1", len(ids))
	}
	for _, l := range held {
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("Unlock: %v", err)
		}
	}
	wg.Wait()
	if len(got) != 15 {
		t.Errorf("%d of 15 waiters got their key", len(got))
	}
	if err := waiter.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if ids := pubsubClients(t, admin, name); len(ids) != 0 {
		t.Errorf("%d pub/sub connections after Close", len(ids))
	}
}

// When the pub/sub connection is lost, it is made again, and every waiter
// is woken once its subscription is back, in case it missed a release
// meanwhile: here a release that sent no message at all.
func TestWakeAfterReconnect(t *testing.T) {
	topologies(t, func(t *testing.T, c redis.UniversalClient) {
		name := fmt.Sprintf("redisnx-reconnect-%d", time.Now().UnixNano())
		wc := cloneClient(t, c, name)
		holder := newTestLocker(t, c, nil)
		waiter := newTestLocker(t, wc, nil)
		ctx := tctx(t, 30*time.Second)
		k := testKey(t)
		if _, err := holder.TryLock(ctx, k, lock.WithTTL(time.Minute), lock.WithDisableAutoRenew(true)); err != nil {
			t.Fatalf("TryLock: %v", err)
		}
		done := make(chan error, 1)
		go func() {
			l, err := waiter.Lock(ctx, k, lock.WithRetry(lock.LinearBackoff(time.Minute)))
			if err == nil {
				l.Unlock(ctx)
			}
			done <- err
		}()
		var id, node string
		if !eventually(5*time.Second, func() bool {
			id, node = subscriber(t, c, name)
			return id != ""
		}) {
			t.Fatalf("the waiter never subscribed")
		}
		// Free the key silently (no release message), then cut the
		// waiter's pub/sub connection.
		c.Del(ctx, lockKey(DefaultPrefix, k))
		if err := nodeClient(t, c, node).ClientKillByFilter(ctx, "ID", id).Err(); err != nil {
			t.Fatalf("CLIENT KILL: %v", err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("waiter: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("the waiter was not woken after its pub/sub connection came back")
		}
	})
}

// subscriber finds the pub/sub connection named name: its id and the
// address of the node it is on.
func subscriber(t *testing.T, c redis.UniversalClient, name string) (id, node string) {
	switch c := c.(type) {
	case *redis.Client:
		if ids := pubsubClients(t, c, name); len(ids) == 1 {
			return ids[0], c.Options().Addr
		}
	case *redis.ClusterClient:
		var mu sync.Mutex
		c.ForEachMaster(tctx(t, 10*time.Second), func(ctx context.Context, m *redis.Client) error {
			if ids := pubsubClients(t, m, name); len(ids) == 1 {
				mu.Lock()
				id, node = ids[0], m.Options().Addr
				mu.Unlock()
			}
			return nil
		})
	}
	return id, node
}

// nodeClient returns a client of the server at addr, closed at cleanup.
func nodeClient(t *testing.T, c redis.UniversalClient, addr string) *redis.Client {
	if c, ok := c.(*redis.Client); ok {
		return c
	}
	n := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { n.Close() })
	return n
}

// An idle pub/sub connection is pinged and kept: the health check does not
// replace a working connection.
func TestIdleConnectionKept(t *testing.T) {
	name := fmt.Sprintf("redisnx-idle-%d", time.Now().UnixNano())
	admin := sharedClient(t, nil)
	holder := newTestLocker(t, sharedClient(t, nil), nil)
	waiter := newPingingLocker(t, sharedClient(t, &redis.Options{ClientName: name}), 100*time.Millisecond)
	ctx := tctx(t, 30*time.Second)
	k := testKey(t)
	held, err := holder.TryLock(ctx, k)
	if err != nil {
		t.Fatalf("TryLock: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		l, err := waiter.Lock(ctx, k, lock.WithRetry(lock.LinearBackoff(time.Minute)))
		if err == nil {
			l.Unlock(ctx)
		}
		done <- err
	}()
	var first []string
	if !eventually(5*time.Second, func() bool { first = pubsubClients(t, admin, name); return len(first) == 1 }) {
		t.Fatalf("the waiter never subscribed")
	}
	time.Sleep(time.Second) // ten ping periods
	if now := pubsubClients(t, admin, name); len(now) != 1 || now[0] != first[0] {
		t.Errorf("pub/sub connection %v replaced by %v while idle", first, now)
	}
	held.Unlock(ctx)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("waiter: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("waiter not woken by the release")
	}
}

// A pub/sub connection that stops answering (the server hangs, the network
// drops it silently) is given up after an unanswered ping and made again;
// the waiters are then woken, in case they missed a release.
func TestUnansweredPingReconnects(t *testing.T) {
	srv := testserver.StartRedis(t, nil)
	srv.RequireFaults(t)
	raw := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { raw.Close() })
	holder := newTestLocker(t, raw, nil)
	waiter := newPingingLocker(t, redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: 300 * time.Millisecond}), 100*time.Millisecond)
	ctx := tctx(t, 30*time.Second)
	k := testKey(t)
	if _, err := holder.TryLock(ctx, k, lock.WithTTL(time.Minute), lock.WithDisableAutoRenew(true)); err != nil {
		t.Fatalf("TryLock: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		l, err := waiter.Lock(ctx, k, lock.WithRetry(lock.LinearBackoff(time.Minute)))
		if err == nil {
			l.Unlock(ctx)
		}
		done <- err
	}()
	ch := lockKey(DefaultPrefix, k) + channelSuffix
	if !eventually(5*time.Second, func() bool { return raw.PubSubNumSub(ctx, ch).Val()[ch] == 1 }) {
		t.Fatalf("the waiter never subscribed")
	}
	raw.Del(ctx, lockKey(DefaultPrefix, k)) // freed without a release message
	if err := srv.Pause(); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	time.Sleep(time.Second)
	if err := srv.Resume(); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("waiter: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("waiter not woken after its silent pub/sub connection was replaced")
	}
}

// newPingingLocker is newTestLocker with a notifier that pings a silent
// pub/sub connection every period.
func newPingingLocker(t *testing.T, c redis.UniversalClient, every time.Duration) *lock.Locker {
	core, lo := redisx.NewCore("redisnx", c, nil, false)
	core.Notify.PingEvery = every
	l := lock.New(newDriver(core), lo)
	t.Cleanup(func() { l.Close() })
	return l
}

// An uncontended release publishes nothing on the key's channel while no
// one listens (a bare subscriber, which wrote no listener mark, hears
// nothing), and a waiter that retries (it subscribes and marks the key,
// redisx.Core.Subscribe) is woken by the same release at once.
func TestReleasePublishesToListeners(t *testing.T) {
	admin := sharedClient(t, nil)
	l := newTestLocker(t, sharedClient(t, nil), nil)
	waiter := newTestLocker(t, sharedClient(t, nil), nil)
	ctx := tctx(t, 30*time.Second)
	key := testKey(t)
	lk := lockKey(DefaultPrefix, key)
	bare := admin.Subscribe(ctx, lk+channelSuffix)
	defer bare.Close()
	if _, err := bare.Receive(ctx); err != nil { // the confirmation
		t.Fatal(err)
	}
	msgs := bare.Channel()

	lease, err := l.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-msgs:
		t.Fatalf("the release published %q with no listener mark", m.Payload)
	case <-time.After(200 * time.Millisecond):
	}

	lease, err = l.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		w, err := waiter.Lock(ctx, key, lock.WithRetry(lock.LinearBackoff(time.Minute)))
		if err == nil {
			err = w.Unlock(ctx)
		}
		got <- err
	}()
	if !eventually(5*time.Second, func() bool { return admin.Exists(ctx, lk+redisx.ListenSuffix).Val() == 1 }) {
		t.Fatal("the waiter wrote no listener mark")
	}
	time.Sleep(50 * time.Millisecond) // its attempt after the mark
	released := time.Now()
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the release did not wake the waiter")
	}
	t.Logf("waiter woken %v after the release", time.Since(released))
	select {
	case <-msgs:
	case <-time.After(time.Second):
		t.Fatal("the release heard by the waiter was not published")
	}
}

// Subscribe returns at its context's end over a client without lanes (a
// Ring here) while the server answers nothing: neither the subscription's
// confirmation (it waits redisx.ConfirmWait at most) nor the listener
// mark's SET, which go-redis would wait on until its read timeout (3 s),
// its context's cancellation notwithstanding.
func TestSubscribeReturnsAtContextEndWithoutLanes(t *testing.T) {
	p := startAuditProxy(t, testserver.SharedRedis(t).Addr())
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": p.Addr()}})
	defer ring.Close()
	if err := ring.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	core, _ := redisx.NewCore("redisnx", ring, nil, false)
	d := newDriver(core)
	defer d.Close()
	if d.Lanes.ReturnsAtContextEnd() {
		t.Fatal("a Ring got lanes")
	}
	p.HoldReq.Store(true)
	defer p.HoldReq.Store(false)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(redisx.ConfirmWait+200*time.Millisecond, cancel)
	start := time.Now()
	_, unsub, err := d.Subscribe(ctx, testKey(t))
	if err == nil {
		unsub()
	}
	if d := time.Since(start); d > redisx.ConfirmWait+time.Second {
		t.Fatalf("Subscribe returned %v after it began, %v after its context ended (err %v)", d, d-redisx.ConfirmWait-200*time.Millisecond, err)
	}
}
