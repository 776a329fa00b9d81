package rediswatch

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/leakcheck"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

func received(c <-chan struct{}, within time.Duration) bool {
	select {
	case <-c:
		return true
	case <-time.After(within):
		return false
	}
}

// Waiters on one key share one channel subscription, subscribed by the
// first and unsubscribed linger after the last; a release wakes them all.
func TestSubscribeSharesChannels(t *testing.T) {
	rdb := standalone(t)
	ctx := testCtx(t)
	d := testDriver(rdb, DefaultPrefix)
	defer d.Close()
	d.Notify.Linger = 300 * time.Millisecond
	k := testKey(t)
	ch := channel(d.LockKey(k))
	numsub := func() int64 { return rdb.PubSubNumSub(ctx, ch).Val()[ch] }
	waitNumsub := func(want int64) {
		t.Helper()
		for deadline := time.Now().Add(time.Second); numsub() != want; {
			if time.Now().After(deadline) {
				t.Fatalf("PUBSUB NUMSUB = %d, want %d", numsub(), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	c1, cancel1, err := d.Subscribe(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	// Subscribe returned: the server has the subscription already.
	if n := numsub(); n != 1 {
		t.Fatalf("PUBSUB NUMSUB = %d right after Subscribe, want 1", n)
	}
	c2, cancel2, err := d.Subscribe(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	waitNumsub(1)
	rdb.Publish(ctx, ch, "")
	if !received(c1, time.Second) || !received(c2, time.Second) {
		t.Fatalf("a release did not wake both waiters")
	}
	cancel1()
	cancel1() // harmless
	waitNumsub(1)
	rdb.Publish(ctx, ch, "")
	if !received(c2, time.Second) {
		t.Fatalf("a release did not wake the remaining waiter")
	}
	cancel2()
	if n := numsub(); n != 1 {
		t.Fatalf("PUBSUB NUMSUB = %d right after the last waiter left, want 1 (kept for linger)", n)
	}
	waitNumsub(0)
}

// After the pub/sub connection is killed, go-redis reconnects and
// resubscribes, and every waiter is woken once, since a release may have
// been missed; later releases reach them again.
func TestWakeAfterReconnect(t *testing.T) {
	srv := testserver.StartRedis(t, nil)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	ctx := testCtx(t)
	d := testDriver(rdb, DefaultPrefix)
	defer d.Close()
	k := testKey(t)
	c, cancel, err := d.Subscribe(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	if received(c, 200*time.Millisecond) {
		t.Fatalf("woken before anything happened")
	}
	if err := rdb.ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	if !received(c, 2*time.Second) {
		t.Fatalf("waiter not woken after the pub/sub connection was killed")
	}
	if n := d.stats.snapshot(d.Notify).Reconnects; n != 1 {
		t.Errorf("Reconnects = %d, want 1", n)
	}
	rdb.Publish(ctx, channel(d.LockKey(k)), "")
	if !received(c, time.Second) {
		t.Fatalf("a release after the reconnection did not wake the waiter")
	}
}

// A pub/sub connection that goes silent (a partition: no RST, no replies)
// is found by the health check, dropped and replaced, and the waiters are
// woken: the release published during the partition was lost to them.
func TestWakeAfterSilentPartition(t *testing.T) {
	rdb := standalone(t)
	p := newBlackhole(t, rdb.Options().Addr)
	sub := redis.NewClient(&redis.Options{Addr: p.addr()})
	defer sub.Close()
	ctx := testCtx(t)
	d := testDriver(sub, DefaultPrefix)
	d.Notify.PingEvery = 200 * time.Millisecond
	defer d.Close()
	k := testKey(t)
	c, cancel, err := d.Subscribe(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	p.cut() // the connections made so far stop carrying anything
	rdb.Publish(ctx, channel(d.LockKey(k)), "")
	if received(c, 100*time.Millisecond) {
		t.Fatalf("a message crossed the partition")
	}
	if !received(c, 3*time.Second) {
		t.Fatalf("waiter not woken after the silent connection was replaced")
	}
	if n := d.stats.snapshot(d.Notify).Reconnects; n < 1 {
		t.Errorf("Reconnects = %d, want at least 1", n)
	}
}

// blackhole is a TCP proxy whose cut makes the connections open so far
// silently drop everything, like a network partition; later connections
// work.
type blackhole struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []*atomic.Bool
}

func newBlackhole(t *testing.T, target string) *blackhole {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackhole{ln: ln}
	var wg sync.WaitGroup
	var open []net.Conn
	t.Cleanup(func() {
		ln.Close()
		b.mu.Lock()
		for _, c := range open {
			c.Close()
		}
		b.mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			dead := &atomic.Bool{}
			b.mu.Lock()
			b.conns = append(b.conns, dead)
			open = append(open, c, s)
			b.mu.Unlock()
			for _, pair := range [][2]net.Conn{{c, s}, {s, c}} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					buf := make([]byte, 32<<10)
					for {
						n, err := pair[0].Read(buf)
						if n > 0 && !dead.Load() {
							pair[1].Write(buf[:n])
						}
						if err != nil {
							pair[1].Close()
							return
						}
					}
				}()
			}
		}
	}()
	return b
}

func (b *blackhole) addr() string { return b.ln.Addr().String() }

func (b *blackhole) cut() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, d := range b.conns {
		d.Store(true)
	}
}

// Close returns promptly and leaves no goroutine behind even when the
// server died while the pub/sub connection was in use.
func TestCloseAfterServerDied(t *testing.T) {
	srv := testserver.StartRedis(t, nil)
	srv.RequireFaults(t)
	base := leakcheck.Take()
	l, err := lock.Open(context.Background(), "rediswatch://"+srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer admin.Close()
	k := testKey(t)
	admin.Set(context.Background(), names.LockKey(k), "raw-holder", time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	go l.Lock(ctx, k) // waits, subscribed
	time.Sleep(200 * time.Millisecond)
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	admin.Close()
	<-ctx.Done()
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	l.Close()
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Close took %v with the server gone", d)
	} else {
		t.Logf("Close took %v", d)
	}
	leakcheck.Verify(t, base)
}
