package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/go-zookeeper/zk"
)

// semLocker returns a new Locker of h, checked to grant permits.
func (h *harness) semLocker(t *testing.T) *lock.Locker {
	t.Helper()
	sl := h.NewLocker(t, nil)
	err := sl.Supports(lock.Permits)
	if err != nil {
		t.Fatalf("Supports(lock.Permits): %v", err)
	}
	return sl
}

// awaitChildren waits up to 5s until key has want children, and returns
// them.
func (h *harness) awaitChildren(t *testing.T, key string, want int) []string {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		children, err := h.Residue(context.Background(), key)
		if err != nil {
			t.Fatalf("listing %s: %v", key, err)
		}
		if len(children) == want {
			return children
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s has children %q; want %d of them", key, children, want)
		}
	}
}

// result is the outcome of a call run in the background.
type result struct {
	lease *lock.Lease
	err   error
}

// goAcquire runs Acquire in the background until ctx ends.
func goAcquire(ctx context.Context, sl *lock.Locker, k string, limit int) <-chan result {
	c := make(chan result, 1)
	go func() {
		l, err := sl.Acquire(ctx, k, limit)
		c <- result{l, err}
	}()
	return c
}

// granted waits up to d for c's grant and fails the test otherwise.
func granted(t *testing.T, c <-chan result, d time.Duration, what string) *lock.Lease {
	t.Helper()
	select {
	case r := <-c:
		if r.err != nil {
			t.Fatalf("%s: %v", what, r.err)
		}
		return r.lease
	case <-time.After(d):
		t.Fatalf("%s: not granted within %v", what, d)
		return nil
	}
}

// waiting fails the test if c delivers within d.
func waiting(t *testing.T, c <-chan result, d time.Duration, what string) {
	t.Helper()
	select {
	case r := <-c:
		t.Fatalf("%s returned (err %v) while it should wait", what, r.err)
	case <-time.After(d):
	}
}

// TestPermitNode: a permit is a node _c_<owner>-permit-<N>-lock-<seq>,
// and its token is the node's czxid.
func TestPermitNode(t *testing.T) {
	servers := testserver.SharedZooKeeper(t).Addrs()
	d := newTestDriver(t, servers, nil)
	raw, _ := rawConn(t, servers, testSessionTimeout, nil)
	ctx := context.Background()
	k := uniqueKey(t)
	var last uint64
	for range 2 {
		l := newLease(k, driver.Permit)
		l.Limit = 5
		if err := d.Acquire(ctx, l); err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		defer d.Release(ctx, l)
		g := l.Data.(*grant)
		want := keyPath(testRoot, k) + "/_c_" + l.Owner + "-permit-5-lock-"
		if !strings.HasPrefix(g.path, want) || len(g.path) != len(want)+10 {
			t.Errorf("node %s, want %s<10-digit sequence>", g.path, want)
		}
		_, st, err := raw.Exists(g.path)
		if err != nil {
			t.Fatal(err)
		}
		if uint64(st.Czxid) != l.Token || l.Token <= last {
			t.Errorf("token %d, czxid %d, previous token %d", l.Token, st.Czxid, last)
		}
		last = l.Token
	}
}

// TestPermitWaitersNoMissedWakeup: limit 2, two permits held, three permit
// waiters queued behind them. Whichever holder goes first, the first
// waiter is granted (it watches both holders), the second when the other
// holder goes (it watches that holder and the first waiter), and the third
// when the first waiter's permit returns: each within a second or two, in
// order, and never more than two at once.
func TestPermitWaitersNoMissedWakeup(t *testing.T) {
	h := newHarness(t, testserver.SharedZooKeeper(t).Addrs(), testSessionTimeout)
	for _, order := range []string{"first holder first", "second holder first"} {
		t.Run(order, func(t *testing.T) {
			k := uniqueKey(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			const limit = 2
			h1 := mustPermit(t, h.semLocker(t), k, limit)
			h2 := mustPermit(t, h.semLocker(t), k, limit)
			var ws []<-chan result
			for i := range 3 {
				ws = append(ws, goAcquire(ctx, h.semLocker(t), k, limit))
				h.awaitChildren(t, k, 3+i) // queued before the next comes
			}
			time.Sleep(200 * time.Millisecond) // every waiter has set its watch
			first, second := h1, h2
			if order == "second holder first" {
				first, second = h2, h1
			}
			if err := first.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			w1 := granted(t, ws[0], 2*time.Second, "first waiter after a holder left")
			waiting(t, ws[1], 300*time.Millisecond, "second waiter with two permits held")
			if err := second.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			w2 := granted(t, ws[1], 2*time.Second, "second waiter after the other holder left")
			waiting(t, ws[2], 300*time.Millisecond, "third waiter with two permits held")
			if w2.Token() <= w1.Token() {
				t.Errorf("second waiter's token %d not above the first's %d", w2.Token(), w1.Token())
			}
			if err := w1.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			w3 := granted(t, ws[2], 2*time.Second, "third waiter after the first waiter left")
			if w3.Token() <= w2.Token() {
				t.Errorf("third waiter's token %d not above the second's %d", w3.Token(), w2.Token())
			}
			w2.Unlock(ctx)
			w3.Unlock(ctx)
			h.awaitChildren(t, k, 0)
		})
	}
}

// TestPermitNotStalledByStalledWaiter: limit 2, two permits held, and a
// permit waiter P1 whose process does nothing (a raw client made its node
// and never looks again; its session lives on). P2 queues behind P1. When
// both holders leave, P1 and P2 are both granted by the rule, and P2 must
// learn it at once: its grant cannot wait for P1's process to act, nor
// for P1's session to expire (it never does here).
func TestPermitNotStalledByStalledWaiter(t *testing.T) {
	h := newHarness(t, testserver.SharedZooKeeper(t).Addrs(), testSessionTimeout)
	k := uniqueKey(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const limit = 2
	h1 := mustPermit(t, h.semLocker(t), k, limit)
	h2 := mustPermit(t, h.semLocker(t), k, limit)
	p1, err := h.raw.Create(h.kp(k)+"/"+nodePrefix(strings.Repeat("7", 32), driver.Permit, limit), nil, zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
	if err != nil {
		t.Fatalf("creating the stalled waiter's node: %v", err)
	}
	defer h.raw.Delete(p1, -1)
	p2c := goAcquire(ctx, h.semLocker(t), k, limit)
	h.awaitChildren(t, k, 4)
	time.Sleep(200 * time.Millisecond) // P2 has set its watches
	waiting(t, p2c, 100*time.Millisecond, "P2 behind two holders and P1")
	h1.Unlock(ctx)
	h2.Unlock(ctx)
	p2 := granted(t, p2c, time.Second, "P2 with two permits free behind a stalled P1")
	defer p2.Unlock(ctx)
	if ok, _, err := h.raw.Exists(p1); err != nil || !ok {
		t.Fatalf("P1's node %s is gone (%v): the test missed its point", p1, err)
	}
	// The stalled P1 and P2 hold the two permits: a third waits.
	p3c := goAcquire(ctx, h.semLocker(t), k, limit)
	waiting(t, p3c, 300*time.Millisecond, "P3 with P1 and P2 granted")
	h.raw.Delete(p1, -1)
	granted(t, p3c, time.Second, "P3 once P1's node went").Unlock(ctx)
}

// TestPermitNotStalledByDisconnectedWaiter: a permit waiter Q whose
// create reply was lost and whose connection is then held down (its
// session lives on) does not hold up P, queued behind it: once the holders
// leave, P is granted while Q is still away. When Q comes back it finds
// its node and is granted on it.
func TestPermitNotStalledByDisconnectedWaiter(t *testing.T) {
	// A session that outlives the time Q's connection is down.
	h := newHarness(t, testserver.SharedZooKeeper(t).Addrs(), 6*time.Second)
	k := uniqueKey(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const limit = 2
	h1 := mustPermit(t, h.semLocker(t), k, limit)
	h2 := mustPermit(t, h.semLocker(t), k, limit)

	ql, cut := h.newCutLocker(t, nil)
	q := ql
	cut.loseCreateReply()
	qc := goAcquire(ctx, q, k, limit)
	qNode := ""
	for deadline := time.Now().Add(5 * time.Second); qNode == ""; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("Q's node did not appear")
		}
		children, err := h.children(k)
		if err != nil {
			t.Fatal(err)
		}
		if len(children) == 3 && cut.dropped.Load() == 1 {
			qNode = slicesMax(children)
		}
	}
	cut.setDown(true) // Q's connection is lost before Q learns of its node

	p := h.semLocker(t)
	pc := goAcquire(ctx, p, k, limit)
	h.awaitChildren(t, k, 4)
	time.Sleep(200 * time.Millisecond) // P has set its watches
	h1.Unlock(ctx)
	h2.Unlock(ctx)
	pl := granted(t, pc, time.Second, "P while Q, before it, is away")
	defer pl.Unlock(ctx)

	cut.setDown(false)
	ql1 := granted(t, qc, 10*time.Second, "Q after its connection came back")
	defer ql1.Unlock(ctx)
	_, st, err := h.raw.Exists(h.kp(k) + "/" + qNode)
	if err != nil || uint64(st.Czxid) != ql1.Token() {
		t.Fatalf("Q was granted another node than the one it made before the cut (czxid %v, token %d, err %v): the test missed its point", st, ql1.Token(), err)
	}
}

func slicesMax(names []string) string {
	best := ""
	for _, n := range names {
		if c, ok := parseChild(n); ok {
			if b, _ := parseChild(best); best == "" || c.seq > b.seq {
				best = n
			}
		}
	}
	return best
}

func mustPermit(t *testing.T, sl *lock.Locker, k string, limit int) *lock.Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := sl.Acquire(ctx, k, limit)
	if err != nil {
		t.Fatalf("Acquire(%q, %d): %v", k, limit, err)
	}
	return l
}

// TestPermitZkLockInterop: a go-zookeeper zk.Lock on the key's node
// excludes permits and is excluded by them, even with permits to spare,
// and a permit that comes after a waiting zk.Lock does not pass it.
func TestPermitZkLockInterop(t *testing.T) {
	h := newHarness(t, testserver.SharedZooKeeper(t).Addrs(), testSessionTimeout)
	sl := h.semLocker(t)
	k := uniqueKey(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const limit = 3

	// A permit first: zk.Lock waits for it, though two permits are left.
	p := mustPermit(t, sl, k, limit)
	zl := zk.NewLock(h.raw, h.kp(k), zk.WorldACL(zk.PermAll))
	zc := make(chan error, 1)
	go func() { zc <- zl.Lock() }()
	blocked(t, zc, 300*time.Millisecond, "zk.Lock while a permit is held")
	// A later permit does not pass the waiting zk.Lock.
	if _, err := sl.TryAcquire(ctx, k, limit); !errors.Is(err, lock.ErrNotAcquired) {
		t.Errorf("TryAcquire behind a waiting zk.Lock: err = %v, want ErrNotAcquired", err)
	}
	later := goAcquire(ctx, sl, k, limit)
	h.awaitChildren(t, k, 3)
	if err := p.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := waitErr(t, zc, 2*time.Second, "zk.Lock after the permit returned"); err != nil {
		t.Fatalf("zk.Lock: %v", err)
	}
	waiting(t, later, 300*time.Millisecond, "a permit while zk.Lock holds")
	if err := zl.Unlock(); err != nil {
		t.Fatal(err)
	}
	q := granted(t, later, 2*time.Second, "the permit after zk.Unlock")

	// zk.Lock while permits are held: it waits; TryAcquire fails while
	// zk.Lock holds.
	zl2 := zk.NewLock(h.raw, h.kp(k), zk.WorldACL(zk.PermAll))
	go func() { zc <- zl2.Lock() }()
	blocked(t, zc, 300*time.Millisecond, "zk.Lock while a permit is held")
	q.Unlock(ctx)
	if err := waitErr(t, zc, 2*time.Second, "zk.Lock after the permit returned"); err != nil {
		t.Fatalf("zk.Lock: %v", err)
	}
	if _, err := sl.TryAcquire(ctx, k, limit); !errors.Is(err, lock.ErrNotAcquired) {
		t.Errorf("TryAcquire while zk.Lock holds: err = %v, want ErrNotAcquired", err)
	}
	if err := zl2.Unlock(); err != nil {
		t.Fatal(err)
	}
	r, err := sl.TryAcquire(ctx, k, limit)
	if err != nil {
		t.Fatalf("TryAcquire after zk.Unlock: %v", err)
	}
	r.Unlock(ctx)
	h.awaitChildren(t, k, 0)
}

// TestPermitWriterNotPassed: a writer queued behind permits is not passed
// by permits that come later, though permits are left; nor is a reader
// behind permits passed. The later permits are granted together once the
// writer and the reader are gone.
func TestPermitWriterNotPassed(t *testing.T) {
	h := newHarness(t, testserver.SharedZooKeeper(t).Addrs(), testSessionTimeout)
	sl := h.semLocker(t)
	rw := sl
	k := uniqueKey(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const limit = 3
	p := mustPermit(t, sl, k, limit)
	wc := make(chan result, 1)
	go func() { l, err := rw.Lock(ctx, k); wc <- result{l, err} }()
	h.awaitChildren(t, k, 2)
	waiting(t, wc, 200*time.Millisecond, "a writer while a permit is held")
	var later []<-chan result
	for i := range 2 {
		later = append(later, goAcquire(ctx, h.semLocker(t), k, limit))
		h.awaitChildren(t, k, 3+i)
	}
	rc := make(chan result, 1)
	go func() { l, err := rw.RLock(ctx, k); rc <- result{l, err} }()
	h.awaitChildren(t, k, 5)
	for i, c := range later {
		waiting(t, c, 200*time.Millisecond, fmt.Sprintf("later permit %d behind a waiting writer", i+1))
	}
	if _, err := sl.TryAcquire(ctx, k, limit); !errors.Is(err, lock.ErrNotAcquired) {
		t.Errorf("TryAcquire behind a waiting writer: err = %v, want ErrNotAcquired", err)
	}
	if err := p.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	w := granted(t, wc, 2*time.Second, "the writer after the permit returned")
	for i, c := range later {
		waiting(t, c, 200*time.Millisecond, fmt.Sprintf("later permit %d while the writer holds", i+1))
	}
	waiting(t, rc, 100*time.Millisecond, "the reader while the writer holds")
	w.Unlock(ctx)
	var held []*lock.Lease
	for i, c := range later {
		held = append(held, granted(t, c, 2*time.Second, fmt.Sprintf("later permit %d after the writer", i+1)))
	}
	waiting(t, rc, 300*time.Millisecond, "a reader behind permits")
	for _, l := range held {
		l.Unlock(ctx)
	}
	r := granted(t, rc, 2*time.Second, "the reader after the permits")
	r.Unlock(ctx)
	h.awaitChildren(t, k, 0)
}

// TestPermitCancelLeavesNoNode: a permit waiter whose context ends
// deletes its node.
func TestPermitCancelLeavesNoNode(t *testing.T) {
	h := newHarness(t, testserver.SharedZooKeeper(t).Addrs(), testSessionTimeout)
	k := uniqueKey(t)
	ctx := context.Background()
	holder := mustPermit(t, h.semLocker(t), k, 1)
	defer holder.Unlock(ctx)
	c, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	wc := goAcquire(c, h.semLocker(t), k, 1)
	h.awaitChildren(t, k, 2) // the waiter queued
	r := <-wc
	if !errors.Is(r.err, lock.ErrNotAcquired) || !errors.Is(r.err, context.DeadlineExceeded) {
		t.Fatalf("cancelled Acquire: err = %v, want ErrNotAcquired and DeadlineExceeded", r.err)
	}
	if left := h.childrenAfter(t, k, 1, time.Second); len(left) != 1 || !strings.Contains(left[0], "-permit-1-lock-") {
		t.Errorf("after the cancelled waiter: children %q, want the holder's node alone", left)
	}
}

// TestPermitLimitMismatch: a permit whose limit differs from a permit
// already present, granted or waiting, is refused with ErrInvalid naming
// both limits, and leaves no node.
func TestPermitLimitMismatch(t *testing.T) {
	h := newHarness(t, testserver.SharedZooKeeper(t).Addrs(), testSessionTimeout)
	sl := h.semLocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	check := func(t *testing.T, k string, err error, have, want int, nodes int) {
		t.Helper()
		if !errors.Is(err, lock.ErrInvalid) {
			t.Fatalf("limit %d on a semaphore of %d: err = %v, want ErrInvalid", want, have, err)
		}
		if msg := err.Error(); !strings.Contains(msg, fmt.Sprintf("of %d permits", have)) || !strings.Contains(msg, fmt.Sprintf("not %d", want)) {
			t.Errorf("error %q does not name both limits, %d and %d", msg, have, want)
		}
		if left := h.childrenAfter(t, k, nodes, time.Second); len(left) != nodes {
			t.Errorf("after the refusal: children %q, want %d", left, nodes)
		}
	}
	t.Run("granted", func(t *testing.T) {
		k := uniqueKey(t)
		p := mustPermit(t, sl, k, 2)
		defer p.Unlock(ctx)
		_, err := sl.TryAcquire(ctx, k, 3)
		check(t, k, err, 2, 3, 1)
		_, err = sl.Acquire(ctx, k, 1)
		check(t, k, err, 2, 1, 1)
	})
	t.Run("waiting", func(t *testing.T) {
		k := uniqueKey(t)
		w, err := sl.Lock(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Unlock(ctx)
		wc := goAcquire(ctx, h.semLocker(t), k, 2) // waits behind the writer
		defer func() {
			if r := <-wc; r.lease != nil {
				r.lease.Unlock(ctx)
			}
		}()
		h.awaitChildren(t, k, 2)
		_, err = sl.Acquire(ctx, k, 3)
		check(t, k, err, 2, 3, 2)
		_, err = sl.TryAcquire(ctx, k, 4)
		check(t, k, err, 2, 4, 2)
		w.Unlock(ctx)
	})
}

// TestPermitCrashedHolder: the permit of a holder whose session expires
// returns: a waiter is granted when the server deletes the node, within
// the session timeout of the crash, and the holder's lease ends.
func TestPermitCrashedHolder(t *testing.T) {
	h := newHarness(t, testserver.SharedZooKeeper(t).Addrs(), testSessionTimeout)
	k := uniqueKey(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hl, cut := h.newCutLocker(t, longTTL)
	hs := hl
	held := mustPermit(t, hs, k, 2)
	other := mustPermit(t, h.semLocker(t), k, 2)
	defer other.Unlock(ctx)
	wc := goAcquire(ctx, h.semLocker(t), k, 2)
	h.awaitChildren(t, k, 3)
	crash := time.Now()
	cut.setDown(true)
	waiting(t, wc, h.timeout/3, "a waiter while the crashed holder's session may live")
	w := granted(t, wc, h.timeout+3*time.Second, "a waiter after the crashed holder's session expired")
	defer w.Unlock(ctx)
	if d := time.Since(crash); d > h.timeout+2*time.Second {
		t.Errorf("the permit returned %v after the crash; session timeout %v", d, h.timeout)
	}
	select {
	case <-held.Done():
		if !errors.Is(held.Err(), lock.ErrLost) {
			t.Errorf("crashed holder's Err() = %v, want ErrLost", held.Err())
		}
	case <-time.After(time.Second):
		t.Errorf("the crashed holder's lease is still open after its permit went to another")
	}
}
