package etcd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// setTxn picks a set's write: two Puts a member, the entry's and the
// counter's (setWrite), for two members or more.
func setTxn(prefix string) func(*pb.TxnRequest) bool {
	return func(r *pb.TxnRequest) bool {
		return len(r.Success) >= 4 && r.Success[0].GetRequestPut() != nil && r.Success[1].GetRequestPut() != nil &&
			strings.HasPrefix(string(r.Success[1].GetRequestPut().Key), prefix+"c/")
	}
}

// setFixture is a Locker that talks to etcd through a lossy proxy only,
// another straight to it, a raw client, and a set of three keys.
type setFixture struct {
	prefix     string
	p          *lossyProxy
	l, other   *lock.Locker
	raw        *clientv3.Client
	keys       []string
	queues     []string
	ctx        context.Context
	liveLeases func() []int64
}

func newSetFixture(t *testing.T, ttl time.Duration) *setFixture {
	e := testserver.SharedEtcd(t)
	f := &setFixture{prefix: fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())}
	f.p = newLossyProxy(t, strings.TrimPrefix(e.Endpoints()[0], "http://"))
	opts := &Options{Prefix: f.prefix, Options: lock.Options{TTL: ttl}}
	f.l = newTestLocker(t, []string{f.p.addr()}, opts, &netCut{})
	f.other = newTestLocker(t, e.Endpoints(), opts, &netCut{})
	f.raw = rawClient(t, e.Endpoints())
	var cancel context.CancelFunc
	f.ctx, cancel = context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	for _, k := range []string{"set/a", "set/b", "set/c"} {
		f.keys = append(f.keys, k)
		f.queues = append(f.queues, f.prefix+"q/"+escape(k)+"/")
	}
	f.liveLeases = func() []int64 {
		t.Helper()
		r, err := f.raw.Leases(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for _, s := range r.Leases {
			ids = append(ids, int64(s.ID))
		}
		return ids
	}
	return f
}

// entries returns the keys under queue q.
func (f *setFixture) entries(t *testing.T, q string) []string {
	t.Helper()
	r, err := f.raw.Get(f.ctx, q, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var ks []string
	for _, kv := range r.Kvs {
		ks = append(ks, strings.TrimPrefix(string(kv.Key), q))
	}
	return ks
}

// A waiter that joins a key's queue between the set's read and its write
// (here: as the write is on its way) makes the write's compare fail: the
// set never passes it, is refused as held, and leaves nothing: no entry
// in any queue but the waiter's, no lease of its own. Without the
// per-key queue compare in the Txn, the set is granted over the waiter.
func TestSetPassesNoWaiter(t *testing.T) {
	f := newSetFixture(t, 30*time.Second)
	// A first set: the counter lease and spares exist before the count.
	m, err := f.l.TryLockMany(f.ctx, f.keys)
	if err != nil || !m.Atomic() {
		t.Fatalf("TryLockMany of a free set: %v (atomic %v)", err, err == nil && m.Atomic())
	}
	m.Unlock(f.ctx)
	g, err := f.raw.Grant(f.ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	before := append(f.liveLeases(), int64(g.ID))
	// the waiter: another Locker's anonymous entry, waiting (token 0)
	waiter := fmt.Sprintf("%032x", 7)
	value := entryValue{since: time.Now().UnixMicro(), owner: strings.Repeat("ab", 16)}.String()
	var armed atomic.Bool
	armed.Store(true)
	set := setTxn(f.prefix)
	before1 := func(r *pb.TxnRequest) bool {
		if set(r) && armed.CompareAndSwap(true, false) {
			if _, err := f.raw.Put(f.ctx, f.queues[1]+waiter, value, clientv3.WithLease(g.ID)); err != nil {
				t.Error(err)
			}
		}
		return false
	}
	f.p.before.Store(&before1)
	m, err = f.l.TryLockMany(f.ctx, f.keys)
	if armed.Load() {
		t.Fatal("no set write went through the proxy: the waiter was not placed")
	}
	if err == nil {
		toks := []uint64{}
		for _, ls := range m.Leases() {
			toks = append(toks, ls.Token())
		}
		t.Fatalf("the set was granted (tokens %v, atomic %v) over %s's waiter", toks, m.Atomic(), f.keys[1])
	}
	if !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("TryLockMany with a waiter on %s: %v; want ErrHeld", f.keys[1], err)
	}
	for i, q := range f.queues {
		want := []string(nil)
		if i == 1 {
			want = []string{waiter}
		}
		if got := f.entries(t, q); !slices.Equal(got, want) {
			t.Errorf("queue of %s after the refused set: %v; want %v", f.keys[i], got, want)
		}
	}
	for _, id := range f.liveLeases() {
		if !slices.Contains(before, id) {
			t.Errorf("lease %x is left after the refused set", id)
		}
	}
	// the waiter gone, the set is the Locker's in one step
	if _, err := f.raw.Revoke(f.ctx, g.ID); err != nil {
		t.Fatal(err)
	}
	m, err = f.l.TryLockMany(f.ctx, f.keys)
	if err != nil || !m.Atomic() {
		t.Fatalf("TryLockMany once the waiter left: %v", err)
	}
	m.Unlock(f.ctx)
}

// A key held by another client refuses the set before any lease is made
// (the read), and leaves no entry on the free keys; a single-key client
// then sees each member of a granted set as a holder, with its value in
// Acquire's layout (an older client reads it alike), and every member's
// token rises with its key's counter: past a counter far ahead of the
// clock (max(counter + 1, clock), as Acquire), and below the next
// single-key grant's.
func TestSetTokensAndHolders(t *testing.T) {
	f := newSetFixture(t, 30*time.Second)
	h, err := f.other.TryLock(f.ctx, f.keys[2])
	if err != nil {
		t.Fatal(err)
	}
	before := f.liveLeases()
	if _, err := f.l.TryLockMany(f.ctx, f.keys); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("TryLockMany with %s held: %v; want ErrHeld", f.keys[2], err)
	}
	for i, q := range f.queues[:2] {
		if got := f.entries(t, q); len(got) != 0 {
			t.Errorf("queue of %s after the refused set: %v", f.keys[i], got)
		}
	}
	for _, id := range f.liveLeases() {
		if !slices.Contains(before, id) {
			t.Errorf("lease %x made by a set refused at its read", id)
		}
	}
	h.Unlock(f.ctx)
	first := h.Token()
	ahead := uint64(time.Now().Add(24 * time.Hour).UnixMicro()) // a counter a day ahead of the clock
	if _, err := f.raw.Put(f.ctx, f.prefix+"c/"+escape(f.keys[1]), counterValue(ahead)); err != nil {
		t.Fatal(err)
	}
	m, err := f.l.TryLockMany(f.ctx, f.keys)
	if err != nil || !m.Atomic() {
		t.Fatalf("TryLockMany of the free set: %v", err)
	}
	ms := m.Leases()
	if got := ms[1].Token(); got != ahead+1 {
		t.Errorf("token of %s: %d; want its counter + 1 = %d", f.keys[1], got, ahead+1)
	}
	if got := ms[2].Token(); got <= first {
		t.Errorf("token of %s: %d after the single-key grant's %d", f.keys[2], got, first)
	}
	for i, k := range f.keys {
		if _, err := f.other.TryLock(f.ctx, k); !errors.Is(err, lock.ErrHeld) {
			t.Errorf("a single-key TryLock of %s while the set holds it: %v", k, err)
		}
		st, err := f.other.Inspect(f.ctx, k)
		if err != nil || len(st.Holders) != 1 || st.Holders[0].Token != ms[i].Token() {
			t.Errorf("Inspect of %s: %+v, %v; want one holder of token %d", k, st, err, ms[i].Token())
		}
		r, err := f.raw.Get(f.ctx, f.queues[i], clientv3.WithPrefix())
		if err != nil || len(r.Kvs) != 1 {
			t.Fatalf("queue of %s: %v %v", k, r, err)
		}
		v, ok := parseValue(string(r.Kvs[0].Value))
		if !ok || v.named || v.mode != 0 || v.token != ms[i].Token() || v.owner == "" || r.Kvs[0].Lease == 0 {
			t.Errorf("entry of %s: %q on lease %x; want an exclusive anonymous grant of token %d on a lease", k, r.Kvs[0].Value, r.Kvs[0].Lease, ms[i].Token())
		}
	}
	// a single-key waiter queued behind a member is granted at the Unlock,
	// with a higher token
	got := make(chan *lock.Lease, 1)
	go func() {
		w, err := f.other.Lock(f.ctx, f.keys[0])
		if err != nil {
			t.Error(err)
		}
		got <- w
	}()
	waitEntries(t, f.raw, f.queues[0], 2)
	if err := m.Unlock(f.ctx); err != nil {
		t.Fatal(err)
	}
	if w := <-got; w != nil {
		if w.Token() <= ms[0].Token() {
			t.Errorf("the waiter's token %d after the set member's %d", w.Token(), ms[0].Token())
		}
		w.Unlock(f.ctx)
	}
}

// A set's write whose every reply is lost (it landed) leaves an outcome
// the driver cannot know: lock's Release of each lease must find each
// member's entry (by its reserved name and OWNER) and delete it at once,
// long before its 30 s lease would; the set is then free. A write whose
// first reply alone is lost is sent again, and the resend recognises the
// set as granted (its entries on its leases, with its values).
func TestSetLostReply(t *testing.T) {
	f := newSetFixture(t, 30*time.Second)
	set := setTxn(f.prefix)
	f.p.losing(set)
	ctx, cancel := context.WithTimeout(f.ctx, 8*time.Second)
	_, err := f.l.TryLockMany(ctx, f.keys)
	cancel()
	if err == nil || errors.Is(err, lock.ErrHeld) {
		t.Fatalf("TryLockMany with every set reply lost: %v; want a failure", err)
	}
	if f.p.lost.Load() == 0 {
		t.Fatal("no set reply was lost: the attack did not happen")
	}
	f.p.losing(nil)
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := 0
		for _, q := range f.queues {
			left += len(f.entries(t, q))
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d entries of the lost set are left 5 s after TryLockMany returned (%v)", left, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	m, err := f.other.TryLockMany(f.ctx, f.keys)
	if err != nil {
		t.Fatalf("the set after the lost reply's clean-up: %v", err)
	}
	m.Unlock(f.ctx)

	var armed atomic.Bool
	armed.Store(true)
	f.p.losing(func(r *pb.TxnRequest) bool { return set(r) && armed.CompareAndSwap(true, false) })
	lost := f.p.lost.Load()
	m, err = f.l.TryLockMany(f.ctx, f.keys)
	if err != nil || !m.Atomic() {
		t.Fatalf("TryLockMany with the first reply lost: %v", err)
	}
	if f.p.lost.Load() != lost+1 {
		t.Fatalf("replies lost: %d; want one more than %d", f.p.lost.Load(), lost)
	}
	for i, ls := range m.Leases() {
		st, err := f.other.Inspect(f.ctx, f.keys[i])
		if err != nil || len(st.Holders) != 1 || st.Holders[0].Token != ls.Token() {
			t.Errorf("Inspect of %s: %+v, %v; want the set's member, token %d", f.keys[i], st, err, ls.Token())
		}
	}
	if err := m.Unlock(f.ctx); err != nil {
		t.Fatal(err)
	}
	for i, q := range f.queues {
		if got := f.entries(t, q); len(got) != 0 {
			t.Errorf("queue of %s after the Unlock: %v", f.keys[i], got)
		}
	}
}

// A set over a server whose --max-txn-ops is below its transaction (3
// keys: 6 reads in one branch, over 4) is ErrNotAtomic, and lock takes
// the keys one by one; a set that fits (2 keys: 4) is taken in one step.
func TestSetTooManyOps(t *testing.T) {
	e := testserver.StartEtcd(t, &testserver.EtcdOptions{MaxTxnOps: 4})
	l := newTestLocker(t, e.Endpoints(), &Options{Prefix: "dlock-test/ops/"}, &netCut{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := l.TryLockMany(ctx, []string{"a", "b", "c"})
	if err != nil {
		t.Fatalf("TryLockMany of 3 keys over --max-txn-ops 4: %v", err)
	}
	if m.Atomic() {
		t.Errorf("3 keys over --max-txn-ops 4 were taken in one step")
	}
	m.Unlock(ctx)
	m, err = l.TryLockMany(ctx, []string{"a", "b"})
	if err != nil || !m.Atomic() {
		t.Fatalf("TryLockMany of 2 keys over --max-txn-ops 4: %v (one step: %v)", err, err == nil && m.Atomic())
	}
	m.Unlock(ctx)
}

// etcd's concurrency.Mutex on a member's MutexPrefix refuses the set,
// which then leaves no entry; and a set member is a holder to the Mutex,
// which waits for the set's Unlock.
func TestSetMutexInterop(t *testing.T) {
	f := newSetFixture(t, 5*time.Second)
	sess, err := concurrency.NewSession(f.raw, concurrency.WithTTL(5))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	mu := concurrency.NewMutex(sess, MutexPrefix(f.prefix, f.keys[1]))
	if err := mu.Lock(f.ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := f.l.TryLockMany(f.ctx, f.keys); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("TryLockMany while a concurrency.Mutex holds %s: %v; want ErrHeld", f.keys[1], err)
	}
	for i, q := range f.queues {
		if n := len(f.entries(t, q)); n != map[bool]int{true: 1}[i == 1] {
			t.Errorf("queue of %s after the refused set: %v", f.keys[i], f.entries(t, q))
		}
	}
	if err := mu.Unlock(f.ctx); err != nil {
		t.Fatal(err)
	}
	m, err := f.l.TryLockMany(f.ctx, f.keys)
	if err != nil || !m.Atomic() {
		t.Fatalf("TryLockMany once the Mutex left: %v", err)
	}
	locked := make(chan error, 1)
	go func() { locked <- mu.Lock(f.ctx) }()
	select {
	case err := <-locked:
		t.Fatalf("the Mutex locked %s while the set holds it: %v", f.keys[1], err)
	case <-time.After(500 * time.Millisecond):
	}
	if err := m.Unlock(f.ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-locked; err != nil {
		t.Fatalf("the Mutex after the set's Unlock: %v", err)
	}
	mu.Unlock(f.ctx)
}

// BenchmarkSetCycle: TryLockMany and Unlock of 3 free keys, in one step
// (a read and one Txn) and key by key (a note makes lock take the keys
// one by one: a TryLock each).
func BenchmarkSetCycle(b *testing.B) {
	e := testserver.SharedEtcd(b)
	l := newTestLocker(b, e.Endpoints(), &Options{Prefix: fmt.Sprintf("dlock-bench/%d/", time.Now().UnixNano())}, &netCut{})
	ctx := context.Background()
	keys := []string{"a", "b", "c"}
	for _, bc := range []struct {
		name   string
		opts   []lock.Option
		atomic bool
	}{{"one-step", nil, true}, {"key-by-key", []lock.Option{lock.WithNote("n")}, false}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				m, err := l.TryLockMany(ctx, keys, bc.opts...)
				if err != nil || m.Atomic() != bc.atomic {
					b.Fatalf("TryLockMany: %v", err)
				}
				if err := m.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestSetCycleRequests: once a Locker has spare leases, a free set of 3
// keys is granted with two KV/Txn (the read, the write) and no lease
// request, and released with one KV/Txn a member; a set with a held key
// is refused by its read alone.
func TestSetCycleRequests(t *testing.T) {
	d, r := testDriver(t, testserver.SharedEtcd(t))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	set := func(i int) []*driver.Lease {
		ls := make([]*driver.Lease, 3)
		for j := range ls {
			ls[j] = &driver.Lease{Key: fmt.Sprintf("set/%d", j), Owner: fmt.Sprintf("%032x", 10*i+j+1), TTL: 10 * time.Second}
		}
		return ls
	}
	for i := range 3 {
		ls := set(i)
		if err := d.AcquireSet(ctx, ls); err != nil {
			t.Fatal(err)
		}
		granted := r.reset()
		for _, l := range ls {
			if err := d.Release(ctx, l); err != nil {
				t.Fatal(err)
			}
		}
		released := r.reset()
		if i == 0 {
			continue // the first makes the leases and the counter lease
		}
		if granted["/etcdserverpb.KV/Txn"] != 2 || granted["/etcdserverpb.Lease/LeaseGrant"] != 0 || granted["/etcdserverpb.Lease/LeaseRevoke"] != 0 {
			t.Errorf("set %d granted with %v; want 2 KV/Txn and no lease request", i, granted)
		}
		if released["/etcdserverpb.KV/Txn"] != 3 || released["/etcdserverpb.Lease/LeaseRevoke"] != 0 {
			t.Errorf("set %d released with %v; want 3 KV/Txn and no LeaseRevoke", i, released)
		}
	}
	h := &driver.Lease{Key: "set/2", Owner: fmt.Sprintf("%032x", 99), TTL: 10 * time.Second}
	if err := d.Acquire(ctx, h); err != nil {
		t.Fatal(err)
	}
	r.reset()
	if err := d.AcquireSet(ctx, set(5)); !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("AcquireSet with set/2 held: %v; want ErrHeld", err)
	}
	if got := r.reset(); got["/etcdserverpb.KV/Txn"] != 1 || len(got) != 1 {
		t.Errorf("a set refused at its read: %v; want 1 KV/Txn alone", got)
	}
}
