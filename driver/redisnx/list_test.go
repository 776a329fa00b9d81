package redisnx

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/testsupport/redisacl"
	"github.com/redis/go-redis/v9"
)

// listLease is a lease of key k with a fresh owner, as lock makes them.
func listLease(k string) *driver.Lease {
	return &driver.Lease{Key: k, Owner: randOwner(), TTL: 30 * time.Second}
}

// blockedOn waits until a Check of l would find its follow-up blocked on
// its grant list (the list's BLPOP is on the server), and returns the
// list's name.
func blockedOn(t *testing.T, c redis.UniversalClient, l *driver.Lease) string {
	t.Helper()
	f := l.Data.(*waiting).f
	if f == nil {
		t.Fatal("the wait has no grant list")
	}
	if !eventually(5*time.Second, func() bool { return f.running.Load() && blocked(c) > 0 }) {
		t.Fatal("the follow-up never blocked on the grant list")
	}
	return f.keys[6]
}

// blocked returns how many clients the single server has blocked.
func blocked(c redis.UniversalClient) int {
	info := c.Info(context.Background(), "clients").Val()
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "blocked_clients:"); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return -1
}

// waitWake waits up to d for a wake-up on wake.
func waitWake(wake <-chan struct{}, d time.Duration) bool {
	select {
	case <-wake:
		return true
	case <-time.After(d):
		return false
	}
}

// A release hands the key to the first waiter in line, and pushes the
// grant to that waiter's grant list alone: the first waiter's Check
// returns the grant with no request (its token is the counter's), and the
// second waiter's Check finds the key held. A release that pushed to the
// second waiter's list would grant both.
//
// blockedOn cannot tell which client the shared server has blocked: a
// push that lands before the first waiter's follow-up sent its LLEN is
// not trusted (the list was not empty when the wait began), and the
// waiter is only woken, as it should be. Such a try is inconclusive, and
// the test tries again with a new key.
func TestGrantListReachesTheFirstWaiterOnly(t *testing.T) {
	c := sharedClient(t, nil)
	d, other := testDriver(c), testDriver(c)
	t.Cleanup(func() { d.Close(); other.Close() })
	ctx := tctx(t, 60*time.Second)
	var k, lk string
	var h, w1, w2 *driver.Lease
	var wake2 chan struct{}
	for try := 1; ; try++ {
		k = fmt.Sprintf("%s-%d", testKey(t), try)
		lk = lockKey(DefaultPrefix, k)
		h, w1, w2 = listLease(k), listLease(k), listLease(k)
		if err := other.Acquire(ctx, h); err != nil {
			t.Fatal(err)
		}
		var wake1 chan struct{}
		wake1, wake2 = make(chan struct{}, 1), make(chan struct{}, 1)
		joinQueued(t, d, w1, wake1)
		joinQueued(t, d, w2, wake2)
		blockedOn(t, c, w1)
		blockedOn(t, c, w2)
		drain(wake1)
		drain(wake2)
		if err := other.Release(ctx, h); err != nil {
			t.Fatal(err)
		}
		if !waitWake(wake1, 5*time.Second) {
			t.Fatal("the hand-over did not reach the first waiter")
		}
		if w1.Data.(*waiting).f.got.Load() != nil {
			break
		}
		if try == 5 {
			t.Fatal("the first waiter was woken without its grant in 5 tries")
		}
		t.Logf("try %d: the first waiter was woken without its grant (pushed before its wait began?); again", try)
		d.Leave(ctx, w2)
		if err := d.Check(ctx, w1); err != nil {
			t.Fatalf("the first waiter's Check: %v", err)
		}
		d.Release(ctx, w1)
	}
	if err := d.Check(ctx, w1); err != nil {
		t.Fatalf("the first waiter's Check: %v", err)
	}
	counter, _ := strconv.ParseUint(c.Get(ctx, lk+counterSuffix).Val(), 10, 64)
	if w1.Token != counter || w1.Token <= h.Token {
		t.Errorf("the first waiter's token %d; want the counter's %d, above the holder's %d", w1.Token, counter, h.Token)
	}
	if v := c.Get(ctx, lk).Val(); v != w1.Owner {
		t.Errorf("lock key holds %q, want the first waiter %q", v, w1.Owner)
	}
	waitWake(wake2, 200*time.Millisecond)
	if err := d.Check(ctx, w2); !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("the second waiter's Check while the first holds: %v (token %d), want ErrHeld", err, w2.Token)
	}
	if err := d.Release(ctx, w1); err != nil {
		t.Fatal(err)
	}
	if !waitWake(wake2, 5*time.Second) {
		t.Fatal("the second hand-over did not reach the second waiter")
	}
	if err := d.Check(ctx, w2); err != nil || w2.Token <= w1.Token {
		t.Fatalf("the second waiter's Check: %v, token %d after %d", err, w2.Token, w1.Token)
	}
	d.Release(ctx, w2)
}

// A grant pushed for an earlier wait of the same owner grants nothing to
// a later wait: neither pushed again to the earlier wait's list, nor
// pushed (verbatim) to the later wait's own list. The later wait's Check
// finds the key held by another client.
func TestGrantListReplayFromEarlierWait(t *testing.T) {
	c := sharedClient(t, nil)
	d, other := testDriver(c), testDriver(c)
	t.Cleanup(func() { d.Close(); other.Close() })
	ctx := tctx(t, 20*time.Second)
	k := testKey(t)
	lk := lockKey(DefaultPrefix, k)
	h1, w := listLease(k), listLease(k)
	if err := other.Acquire(ctx, h1); err != nil {
		t.Fatal(err)
	}
	wake := make(chan struct{}, 1)
	joinQueued(t, d, w, wake)
	first := blockedOn(t, c, w)
	nonce := w.Data.(*waiting).f.nonce
	if err := other.Release(ctx, h1); err != nil {
		t.Fatal(err)
	}
	waitWake(wake, 5*time.Second)
	if err := d.Check(ctx, w); err != nil {
		t.Fatal(err)
	}
	old := nonce + " " + strconv.FormatUint(w.Token, 10) // what the release pushed

	// The grant is lost (the key deleted behind its back); another client
	// takes the key; the owner waits again.
	c.Del(ctx, lk)
	h2 := listLease(k)
	if err := other.Acquire(ctx, h2); err != nil {
		t.Fatal(err)
	}
	joinQueued(t, d, w, wake)
	second := blockedOn(t, c, w)
	if second == first {
		t.Fatalf("the second wait blocks on the first wait's list %q", first)
	}
	drain(wake)
	for _, list := range []string{first, second} {
		if err := c.RPush(ctx, list, old).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if !waitWake(wake, 5*time.Second) {
		t.Fatal("the replayed push did not wake the waiter")
	}
	if err := d.Check(ctx, w); !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("Check after a replayed grant, another client holding the key: %v (token %d, holder's %d), want ErrHeld", err, w.Token, h2.Token)
	}
	c.Del(ctx, first)
	other.Release(ctx, h2)
	if !waitWake(wake, 5*time.Second) {
		t.Fatal("the hand-over did not wake the waiter")
	}
	if err := d.Check(ctx, w); err != nil || w.Token <= h2.Token {
		t.Fatalf("Check after the real hand-over: %v, token %d after the holder's %d", err, w.Token, h2.Token)
	}
	d.Release(ctx, w)
}

// A client with pub/sub rights alone cannot push to a waiter's grant
// list (the server refuses it), and its attempt grants nothing; the same
// push by a client that may write the lock's keys does grant (the trust
// model's line: such a client could delete the lock anyway), which shows
// that the test would see a grant.
func TestPubSubClientCannotPushGrant(t *testing.T) {
	c := sharedClient(t, nil)
	spy := redisacl.PubSubUser(t, c, DefaultPrefix)
	d, other := testDriver(c), testDriver(c)
	t.Cleanup(func() { d.Close(); other.Close() })
	ctx := tctx(t, 20*time.Second)
	k := testKey(t)
	h, w := listLease(k), listLease(k)
	if err := other.Acquire(ctx, h); err != nil {
		t.Fatal(err)
	}
	wake := make(chan struct{}, 1)
	joinQueued(t, d, w, wake)
	list := blockedOn(t, c, w)
	forged := w.Data.(*waiting).f.nonce + " " + strconv.FormatUint(h.Token+1, 10)
	drain(wake)
	err := spy.RPush(ctx, list, forged).Err()
	if err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("a pub/sub-only client's RPUSH to the grant list: %v, want NOPERM", err)
	}
	spy.Publish(ctx, w.Data.(*waiting).w.Inbox(), w.Owner)
	waitWake(wake, 200*time.Millisecond)
	if err := d.Check(ctx, w); !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("Check after the pub/sub client's forgeries: %v (token %d), want ErrHeld", err, w.Token)
	}
	blockedOn(t, c, w)
	drain(wake)
	if err := c.RPush(ctx, list, forged).Err(); err != nil {
		t.Fatal(err)
	}
	if !waitWake(wake, 5*time.Second) {
		t.Fatal("the writer's push did not wake the waiter")
	}
	if err := d.Check(ctx, w); err != nil || w.Token != h.Token+1 {
		t.Fatalf("a push of a client that may write keys: Check %v, token %d; want the pushed %d (the test sees a grant)", err, w.Token, h.Token+1)
	}
}

// A Lock cancelled while its follow-up is blocked on the grant list is
// unblocked by its Leave at once (not after the BLPOP's timeout), and a
// grant pushed while it was leaving is passed on by that Leave to the
// next waiter, whose Check gets it.
func TestLeaveUnblocksAndPassesOnAPushedGrant(t *testing.T) {
	c := sharedClient(t, nil)
	d, other := testDriver(c), testDriver(c)
	t.Cleanup(func() { d.Close(); other.Close() })
	ctx := tctx(t, 20*time.Second)
	k := testKey(t)
	lk := lockKey(DefaultPrefix, k)
	h, w1, w2 := listLease(k), listLease(k), listLease(k)
	if err := other.Acquire(ctx, h); err != nil {
		t.Fatal(err)
	}
	wake1, wake2 := make(chan struct{}, 1), make(chan struct{}, 1)
	joinQueued(t, d, w1, wake1)
	blockedOn(t, c, w1)
	before := blocked(c)
	start := time.Now()
	if err := d.Leave(ctx, w1); err != nil {
		t.Fatal(err)
	}
	if !eventually(300*time.Millisecond, func() bool { return blocked(c) < before }) {
		t.Fatalf("the follow-up still blocked %v after Leave", time.Since(start))
	}

	// A grant pushed to a waiter that is leaving: its Leave passes it on.
	w1 = listLease(k)
	joinQueued(t, d, w1, wake1)
	joinQueued(t, d, w2, wake2)
	blockedOn(t, c, w1)
	blockedOn(t, c, w2)
	if err := other.Release(ctx, h); err != nil {
		t.Fatal(err)
	}
	if !waitWake(wake1, 5*time.Second) {
		t.Fatal("the hand-over did not reach the first waiter")
	}
	drain(wake2)
	if err := d.Leave(ctx, w1); err != nil { // cancelled before its Check
		t.Fatal(err)
	}
	if !waitWake(wake2, 5*time.Second) {
		t.Fatal("the leave did not hand the key to the next waiter")
	}
	if err := d.Check(ctx, w2); err != nil {
		t.Fatalf("the next waiter's Check: %v", err)
	}
	if v := c.Get(ctx, lk).Val(); v != w2.Owner {
		t.Errorf("lock key holds %q, want the next waiter %q", v, w2.Owner)
	}
	d.Release(ctx, w2)
}

// A Locker blocks at most half its client's pool on grant lists: with a
// pool of 4 and 6 waits, 2 block and the others are told on the inbox;
// every wait is granted in turn, and the pool serves the releases.
func TestGrantListsBoundedByPool(t *testing.T) {
	c := sharedClient(t, &redis.Options{PoolSize: 4})
	d, other := testDriver(c), testDriver(c)
	t.Cleanup(func() { d.Close(); other.Close() })
	ctx := tctx(t, 30*time.Second)
	k := testKey(t)
	h := listLease(k)
	if err := other.Acquire(ctx, h); err != nil {
		t.Fatal(err)
	}
	base := blocked(c)
	var ws []*driver.Lease
	var wakes []chan struct{}
	lists := 0
	for range 6 {
		w, wake := listLease(k), make(chan struct{}, 1)
		joinQueued(t, d, w, wake)
		if w.Data.(*waiting).f != nil {
			lists++
		}
		ws, wakes = append(ws, w), append(wakes, wake)
	}
	time.Sleep(100 * time.Millisecond)
	n := blocked(c) - base
	t.Logf("pool 4: %d of 6 waits have a grant list, %d connections blocked", lists, n)
	if lists != 2 || n > 2 {
		t.Fatalf("pool 4: %d waits with a grant list, %d connections blocked; want 2 and at most 2", lists, n)
	}
	if err := other.Release(ctx, h); err != nil {
		t.Fatal(err)
	}
	prev, next := h, 0
	for deadline := time.Now().Add(20 * time.Second); next < len(ws) && time.Now().Before(deadline); {
		waitWake(wakes[next], 50*time.Millisecond)
		for i := next; i < len(ws); i++ { // every wait's step, as lock makes them
			err := d.Check(ctx, ws[i])
			if errors.Is(err, driver.ErrHeld) {
				continue
			}
			if err != nil || i != next || ws[i].Token <= prev.Token {
				t.Fatalf("waiter %d (next in line %d): %v, token %d after %d", i, next, err, ws[i].Token, prev.Token)
			}
			if err := d.Release(ctx, ws[i]); err != nil {
				t.Fatal(err)
			}
			prev, next = ws[i], next+1
		}
	}
	if next < len(ws) {
		t.Fatalf("%d of %d waits granted", next, len(ws))
	}
}
