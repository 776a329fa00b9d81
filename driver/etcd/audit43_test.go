package etcd

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// readSetTxn picks a set's read (readSet): a range per queue and per
// counter, nothing written.
func readSetTxn(n int) func(*pb.TxnRequest) bool {
	return func(r *pb.TxnRequest) bool {
		if len(r.Success) != 2*n || len(r.Compare) != 0 {
			return false
		}
		for _, op := range r.Success {
			if op.GetRequestRange() == nil {
				return false
			}
		}
		return true
	}
}

// TestAudit43SetLateWriteAfterCleanTry: a set's write whose first try is
// held on its way (its client timed out and sent it again) must never
// land after the attempt ended. Here a foreign entry (a
// concurrency.Mutex's, or any other client's key in the queue, which
// moves no counter) comes and goes: the resend fails its compare (not
// landed), the next read finds the set free, its write fails its compare
// at its only try, and the read after it finds the key held, so
// TryLockMany returns ErrHeld. The first try, still held, then reaches
// etcd once the foreign entry left: every counter is as it read them and
// every queue empty, so unless its leases were revoked it puts the set's
// entries, a grant nobody holds, on leases the Locker keeps as spares
// (and renews once a later grant takes one).
func TestAudit43SetLateWriteAfterCleanTry(t *testing.T) {
	f := newSetFixture(t, 30*time.Second)
	foreign := f.queues[0] + "mutex-like"
	set, read := setTxn(f.prefix), readSetTxn(len(f.keys))
	release := make(chan struct{})
	var mu sync.Mutex
	phase := 0
	hook := func(r *pb.TxnRequest) bool {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case phase == 0 && set(r): // the first try: held until release, then sent on
			phase = 1
			mu.Unlock()
			<-release
			mu.Lock()
			return true
		case phase == 1 && set(r): // the resend: a foreign entry comes first
			phase = 2
			if _, err := f.raw.Put(f.ctx, foreign, "x"); err != nil {
				t.Error(err)
			}
		case phase == 2 && read(r): // the next read: it left
			phase = 3
			if _, err := f.raw.Delete(f.ctx, foreign); err != nil {
				t.Error(err)
			}
		case phase == 3 && set(r): // the next write: it came again
			phase = 4
			if _, err := f.raw.Put(f.ctx, foreign, "x"); err != nil {
				t.Error(err)
			}
		}
		return false
	}
	f.p.before.Store(&hook)
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	_, err := f.l.TryLockMany(f.ctx, f.keys)
	mu.Lock()
	reached := phase
	mu.Unlock()
	if reached != 4 {
		t.Fatalf("the attack stopped at phase %d (TryLockMany: %v)", reached, err)
	}
	if !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("TryLockMany with the foreign entry back: %v; want ErrHeld", err)
	}
	// the foreign entry leaves; the held first try reaches etcd
	if _, err := f.raw.Delete(f.ctx, foreign); err != nil {
		t.Fatal(err)
	}
	late := f.p.late.Load()
	close(release)
	for f.p.late.Load() == late {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // lock's clean-up, had there been one
	for i, q := range f.queues {
		if got := f.entries(t, q); len(got) != 0 {
			r, _ := f.raw.Get(f.ctx, q+got[0])
			t.Errorf("queue of %s after the set returned ErrHeld and its held write arrived: %v (lease %x): a grant nobody holds", f.keys[i], got, r.Kvs[0].Lease)
		}
	}
	// and the keys are free to others
	m, err := f.other.TryLockMany(f.ctx, f.keys)
	if err != nil {
		t.Fatalf("another Locker's TryLockMany after the set's attempt ended: %v", err)
	}
	m.Unlock(f.ctx)
}

// TestAudit43SetCancelled: a TryLockMany whose set writes are all held
// on their way returns by its context's end, and its writes, reaching
// etcd after it returned, leave nothing: lock's clean-up revoked the
// members' leases first, so they fail for want of them.
func TestAudit43SetCancelled(t *testing.T) {
	f := newSetFixture(t, 30*time.Second)
	set := setTxn(f.prefix)
	release := make(chan struct{})
	var held atomic.Int64
	hook := func(r *pb.TxnRequest) bool {
		if !set(r) {
			return false
		}
		held.Add(1)
		<-release
		return true
	}
	f.p.before.Store(&hook)
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	before := f.liveLeases()
	ctx, cancel := context.WithTimeout(f.ctx, 1500*time.Millisecond)
	start := time.Now()
	_, err := f.l.TryLockMany(ctx, f.keys)
	took := time.Since(start)
	cancel()
	if err == nil || errors.Is(err, lock.ErrHeld) {
		t.Fatalf("TryLockMany with its writes held: %v; want a failure at its context's end", err)
	}
	if took > 1500*time.Millisecond+300*time.Millisecond {
		t.Errorf("TryLockMany returned %v after its start, its context lasting 1.5 s", took)
	}
	if held.Load() == 0 {
		t.Fatal("no set write was held: the attack did not happen")
	}
	time.Sleep(time.Second) // lock's clean-up in the background
	late := f.p.late.Load()
	close(release)
	released = true
	for f.p.late.Load() < late+held.Load() {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	for i, q := range f.queues {
		if got := f.entries(t, q); len(got) != 0 {
			t.Errorf("queue of %s after the held writes of a cancelled set arrived: %v", f.keys[i], got)
		}
	}
	for _, id := range f.liveLeases() {
		if slices.Contains(before, id) {
			continue
		}
		ttl, err := f.raw.TimeToLive(f.ctx, clientv3.LeaseID(id), clientv3.WithAttachedKeys())
		if err != nil {
			continue
		}
		for _, k := range ttl.Keys {
			if strings.HasPrefix(string(k), f.prefix+"q/") { // the counter lease carries counters
				t.Errorf("lease %x of the cancelled set is left with entry %s", id, k)
			}
		}
	}
}

// TestAudit43SetMemberLeaseGone: a member's lease that is gone when the
// set's write reaches etcd (it expired between the read and the write,
// or a user revoked the spare) fails the write; the set is made again on
// new leases and granted in one step, never on the lease that is gone,
// and a waiter that queued meanwhile is not passed.
func TestAudit43SetMemberLeaseGone(t *testing.T) {
	f := newSetFixture(t, 30*time.Second)
	set := setTxn(f.prefix)
	var armed atomic.Bool
	armed.Store(true)
	var gone atomic.Int64
	hook := func(r *pb.TxnRequest) bool {
		if set(r) && armed.CompareAndSwap(true, false) {
			id := r.Success[2].GetRequestPut().Lease
			gone.Store(id)
			if _, err := f.raw.Revoke(f.ctx, clientv3.LeaseID(id)); err != nil {
				t.Error(err)
			}
		}
		return false
	}
	f.p.before.Store(&hook)
	m, err := f.l.TryLockMany(f.ctx, f.keys)
	if err != nil || !m.Atomic() {
		t.Fatalf("TryLockMany with a member's lease gone at its write: %v", err)
	}
	if armed.Load() {
		t.Fatal("no set write went through the proxy")
	}
	for i, q := range f.queues {
		r, err := f.raw.Get(f.ctx, q, clientv3.WithPrefix())
		if err != nil || len(r.Kvs) != 1 {
			t.Fatalf("queue of %s: %v %v", f.keys[i], r, err)
		}
		if r.Kvs[0].Lease == gone.Load() {
			t.Errorf("entry of %s on the revoked lease %x", f.keys[i], gone.Load())
		}
		ttl, err := f.raw.TimeToLive(f.ctx, clientv3.LeaseID(r.Kvs[0].Lease))
		if err != nil || ttl.TTL <= 0 {
			t.Errorf("entry of %s on lease %x, which is not alive (%v %v)", f.keys[i], r.Kvs[0].Lease, ttl, err)
		}
	}
	m.Unlock(f.ctx)
}

// TestAudit43SetRestrictedUsers: a user who may only read the prefix,
// and one who may write the queues but only read the counters, are
// refused a set (not ErrHeld: the cause), and leave no entry and no
// lease with keys; a set of a user with read-write then takes the keys.
func TestAudit43SetRestrictedUsers(t *testing.T) {
	prefix := fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())
	e := authEtcd(t, prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	keys := []string{"ro/a", "ro/b", "ro/c"}
	root := userClient(t, e.Endpoints(), "root", "rootpw", nil)
	opts := &Options{Prefix: prefix, Options: lock.Options{TTL: 10 * time.Second}}
	for _, u := range [][2]string{{"reader", "readerpw"}, {"queueonly", "queueonlypw"}} {
		l := authLocker(t, e, u[0], u[1], opts)
		_, err := l.TryLockMany(ctx, keys)
		if err == nil || errors.Is(err, lock.ErrHeld) {
			t.Errorf("%s's TryLockMany: %v; want the refusal", u[0], err)
		}
		r, err := root.Get(ctx, prefix, clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range r.Kvs {
			t.Errorf("%s's refused set left %s", u[0], kv.Key)
		}
	}
	time.Sleep(200 * time.Millisecond)
	ls, err := root.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range ls.Leases {
		ttl, err := root.TimeToLive(ctx, s.ID, clientv3.WithAttachedKeys())
		if err == nil && len(ttl.Keys) > 0 {
			t.Errorf("lease %x left with keys %q", s.ID, ttl.Keys)
		}
	}
	app := authLocker(t, e, "app", "apppw", opts)
	m, err := app.TryLockMany(ctx, keys)
	if err != nil || !m.Atomic() {
		t.Fatalf("app's TryLockMany: %v", err)
	}
	m.Unlock(ctx)
}

// TestAudit43SetLostReplyNoPass: a set's first write try is held on its
// way (no reply: the client sends it again); meanwhile another client
// takes a member and a waiter queues behind it. The resend fails its
// compare, the set is refused as held, and the held try, reaching etcd
// while the waiter holds the key and then once it left, lands nowhere:
// the waiter is never passed, and the set leaves no entry.
func TestAudit43SetLostReplyNoPass(t *testing.T) {
	f := newSetFixture(t, 30*time.Second)
	set := setTxn(f.prefix)
	release := make(chan struct{})
	var phase atomic.Int32
	var x *lock.Lease
	waiter := make(chan *lock.Lease, 1)
	hook := func(r *pb.TxnRequest) bool {
		if !set(r) {
			return false
		}
		switch phase.Add(1) {
		case 1:
			<-release
			return true
		case 2: // the resend: b is taken, and a waiter queues behind
			var err error
			if x, err = f.other.TryLock(f.ctx, f.keys[1]); err != nil {
				t.Error(err)
				return false
			}
			go func() {
				w, err := f.other.Lock(f.ctx, f.keys[1])
				if err != nil {
					t.Error(err)
				}
				waiter <- w
			}()
			waitEntries(t, f.raw, f.queues[1], 2)
		}
		return false
	}
	f.p.before.Store(&hook)
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	_, err := f.l.TryLockMany(f.ctx, f.keys)
	if phase.Load() < 2 || x == nil {
		t.Fatalf("the attack did not happen (phase %d): %v", phase.Load(), err)
	}
	if !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("TryLockMany with %s taken and waited for after its lost try: %v; want ErrHeld", f.keys[1], err)
	}
	if err := x.Unlock(f.ctx); err != nil {
		t.Fatal(err)
	}
	w := <-waiter
	if w == nil {
		t.FailNow()
	}
	late := f.p.late.Load()
	close(release)
	released = true
	for f.p.late.Load() == late {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	for i, q := range f.queues {
		want := 0
		if i == 1 {
			want = 1 // the waiter, now holder
		}
		if got := f.entries(t, q); len(got) != want {
			t.Errorf("queue of %s with the waiter holding %s: %v", f.keys[i], f.keys[1], got)
		}
	}
	if st, err := f.other.Inspect(f.ctx, f.keys[1]); err != nil || len(st.Holders) != 1 || st.Holders[0].Token != w.Token() {
		t.Errorf("Inspect of %s: %+v %v; want the waiter alone (token %d)", f.keys[1], st, err, w.Token())
	}
	w.Unlock(f.ctx)
	m, err := f.other.TryLockMany(f.ctx, f.keys)
	if err != nil {
		t.Fatalf("the set after the waiter's Unlock: %v", err)
	}
	if tok, _ := m.Token(f.keys[1]); tok <= w.Token() {
		t.Errorf("set token of %s: %d after the waiter's %d", f.keys[1], tok, w.Token())
	}
	m.Unlock(f.ctx)
}

// TestAudit43SetTokensCluster: on a three-member cluster, each Locker's
// client balancing over every member, sets (TryLockMany, LockMany) and
// single-key grants (Lock, TryLock) interleave on four keys, with a
// concurrency.Mutex on one key and one key's counter pushed a day ahead
// of the clock mid-run: at most one holder of a key at any time, and
// every key's tokens rise in the order of its grants.
func TestAudit43SetTokensCluster(t *testing.T) {
	setTokenStress(t, testserver.StartEtcdCluster(t, nil), false)
}

// TestAudit43SetTokensFailover: TestAudit43SetTokensCluster's mix with
// the leader killed mid-run (calls may fail meanwhile): still one holder
// of a key at a time, and tokens rising per key across the failover.
func TestAudit43SetTokensFailover(t *testing.T) {
	e := testserver.StartEtcdCluster(t, nil)
	e.RequireFaults(t)
	setTokenStress(t, e, true)
}

func setTokenStress(t *testing.T, e *testserver.Etcd, kill bool) {
	prefix := fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())
	opts := &Options{Prefix: prefix, Options: lock.Options{TTL: 10 * time.Second}}
	raw := rawClient(t, e.Endpoints())
	keys := []string{"tok/a", "tok/b", "tok/c", "tok/d"}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var mu sync.Mutex
	inUse := map[string]string{}
	last := map[string]uint64{}
	grants, atomicSets := map[string]int{}, 0
	take := func(who, k string, tok uint64, fenced bool) {
		mu.Lock()
		defer mu.Unlock()
		if h := inUse[k]; h != "" {
			t.Errorf("%s granted %s while %s holds it", who, k, h)
		}
		inUse[k] = who
		if fenced {
			if tok <= last[k] {
				t.Errorf("%s: token %d of %s after %d", who, tok, k, last[k])
			}
			last[k] = tok
			grants[k]++
		}
	}
	drop := func(k string) {
		mu.Lock()
		inUse[k] = ""
		mu.Unlock()
	}
	run := time.Now().Add(8 * time.Second)
	var wg sync.WaitGroup
	worker := func(i int, body func(l *lock.Locker, rnd *rand.Rand)) {
		l := newTestLocker(t, e.Endpoints(), opts, &netCut{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(i), 43))
			for time.Now().Before(run) && ctx.Err() == nil {
				body(l, rnd)
			}
		}()
	}
	hold := func() { time.Sleep(time.Duration(1+time.Now().UnixNano()%3) * time.Millisecond) }
	for i := range 3 {
		worker(i, func(l *lock.Locker, rnd *rand.Rand) {
			perm := rnd.Perm(len(keys))
			var ks []string
			for _, j := range perm[:2+rnd.IntN(3)] {
				ks = append(ks, keys[j])
			}
			var m *lock.MultiLease
			var err error
			if i == 0 {
				m, err = l.TryLockMany(ctx, ks)
			} else {
				m, err = l.LockMany(ctx, ks)
			}
			if err != nil {
				if !errors.Is(err, lock.ErrHeld) && !kill {
					t.Errorf("set %v: %v", ks, err)
				}
				return
			}
			who := fmt.Sprintf("set%d", i)
			for _, k := range m.Keys() {
				tok, _ := m.Token(k)
				take(who, k, tok, true)
			}
			if m.Atomic() {
				mu.Lock()
				atomicSets++
				mu.Unlock()
			}
			hold()
			for _, k := range m.Keys() {
				drop(k)
			}
			if err := m.Unlock(ctx); err != nil && !kill {
				t.Errorf("set %v Unlock: %v", ks, err)
			}
		})
	}
	for i := 3; i < 5; i++ {
		worker(i, func(l *lock.Locker, rnd *rand.Rand) {
			k := keys[rnd.IntN(len(keys))]
			var ls *lock.Lease
			var err error
			if i == 3 {
				ls, err = l.TryLock(ctx, k)
			} else {
				ls, err = l.Lock(ctx, k)
			}
			if err != nil {
				if !errors.Is(err, lock.ErrHeld) && !kill {
					t.Errorf("single %s: %v", k, err)
				}
				return
			}
			who := fmt.Sprintf("single%d", i)
			take(who, k, ls.Token(), true)
			hold()
			drop(k)
			if err := ls.Unlock(ctx); err != nil && !kill {
				t.Errorf("single %s Unlock: %v", k, err)
			}
		})
	}
	// a concurrency.Mutex on keys[0]
	sess, err := concurrency.NewSession(raw, concurrency.WithTTL(10))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	wg.Add(1)
	go func() {
		defer wg.Done()
		mx := concurrency.NewMutex(sess, MutexPrefix(prefix, keys[0]))
		for time.Now().Before(run) && ctx.Err() == nil {
			if err := mx.Lock(ctx); err != nil {
				if !kill {
					t.Error(err)
					return
				}
				time.Sleep(100 * time.Millisecond) // the failover
				continue
			}
			take("mutex", keys[0], 0, false)
			hold()
			drop(keys[0])
			for err := mx.Unlock(ctx); err != nil; err = mx.Unlock(ctx) {
				if !kill || ctx.Err() != nil {
					t.Error(err)
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	time.Sleep(2 * time.Second)
	if kill {
		leader, err := e.KillLeader()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("killed the leader, member %d", leader)
		if _, err := e.WaitLeader(10 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(time.Second)
	ahead := uint64(time.Now().Add(24 * time.Hour).UnixMicro())
	if _, err := raw.Put(ctx, prefix+"c/"+escape(keys[1]), counterValue(ahead)); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("grants per key %v, sets in one step %d, %s's last token %d (counter pushed to %d)", grants, atomicSets, keys[1], last[keys[1]], ahead)
	if atomicSets == 0 {
		t.Error("no set was taken in one step")
	}
	if last[keys[1]] <= ahead {
		t.Errorf("%s's last token %d: none past the counter pushed to %d", keys[1], last[keys[1]], ahead)
	}
}

// TestAudit43SetLargest: a set of MaxKeys keys of MaxKeyLen bytes that
// escape to three times their length (every byte a '/') is taken in one
// step, under etcd's default request size, and released.
func TestAudit43SetLargest(t *testing.T) {
	e := testserver.SharedEtcd(t)
	prefix := fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())
	l := newTestLocker(t, e.Endpoints(), &Options{Prefix: prefix, Options: lock.Options{TTL: 10 * time.Second}}, &netCut{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var keys []string
	for i := range lock.MaxKeys {
		keys = append(keys, strings.Repeat("/", lock.MaxKeyLen-4)+fmt.Sprintf("%04d", i))
	}
	m, err := l.TryLockMany(ctx, keys)
	if err != nil {
		t.Fatalf("TryLockMany of %d keys of %d bytes: %v", len(keys), lock.MaxKeyLen, err)
	}
	if !m.Atomic() {
		t.Errorf("the largest set was not taken in one step")
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestAudit43SetLateDuplicateAfterUnlock: a set's first write try is held
// on its way; the resend grants the set; the set is released (its leases
// kept as spares, alive) and only then does the held try reach etcd,
// every queue empty again. It must not land: the counters moved with
// the grant it duplicates. Then no grant is left that nobody holds.
func TestAudit43SetLateDuplicateAfterUnlock(t *testing.T) {
	f := newSetFixture(t, 30*time.Second)
	set := setTxn(f.prefix)
	release := make(chan struct{})
	var phase atomic.Int32
	hook := func(r *pb.TxnRequest) bool {
		if set(r) && phase.Add(1) == 1 {
			<-release
			return true
		}
		return false
	}
	f.p.before.Store(&hook)
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	m, err := f.l.TryLockMany(f.ctx, f.keys)
	if err != nil || !m.Atomic() {
		t.Fatalf("TryLockMany with its first try held: %v", err)
	}
	if phase.Load() < 2 {
		t.Fatal("the set was granted without a resend: the attack did not happen")
	}
	if err := m.Unlock(f.ctx); err != nil {
		t.Fatal(err)
	}
	late := f.p.late.Load()
	close(release)
	released = true
	for f.p.late.Load() == late {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	for i, q := range f.queues {
		if got := f.entries(t, q); len(got) != 0 {
			t.Errorf("queue of %s after the Unlock and the held try's arrival: %v: a grant nobody holds", f.keys[i], got)
		}
	}
	if m, err := f.other.TryLockMany(f.ctx, f.keys); err != nil {
		t.Errorf("another Locker's set after the late duplicate: %v", err)
	} else {
		m.Unlock(f.ctx)
	}
}

// TestAudit43SetMemberLeaseExpired: with a TTL of 1 s, the set's first
// write is held 1.6 s on its way (within its try's bound), so every
// member's lease expires between the read and the write: the write
// fails for want of them, and the set is made again on new leases,
// granted in one step on live leases, its validity within the TTL.
func TestAudit43SetMemberLeaseExpired(t *testing.T) {
	f := newSetFixture(t, time.Second)
	set := setTxn(f.prefix)
	var phase atomic.Int32
	var first atomic.Int64
	hook := func(r *pb.TxnRequest) bool {
		if set(r) && phase.Add(1) == 1 {
			first.Store(r.Success[0].GetRequestPut().Lease)
			time.Sleep(1600 * time.Millisecond)
		}
		return false
	}
	f.p.before.Store(&hook)
	start := time.Now()
	m, err := f.l.TryLockMany(f.ctx, f.keys)
	if err != nil || !m.Atomic() {
		t.Fatalf("TryLockMany with its leases expired before its write: %v", err)
	}
	if phase.Load() < 2 {
		t.Fatalf("the set was granted at its first write (phase %d): the leases did not expire first", phase.Load())
	}
	for i, ls := range m.Leases() {
		if d := time.Until(ls.Deadline()); d <= 0 || d > time.Second {
			t.Errorf("member %s: deadline in %v (validity %v, %v after the call's start); want within the 1 s lease", f.keys[i], d, ls.Validity(), time.Since(start))
		}
		r, err := f.raw.Get(f.ctx, f.queues[i], clientv3.WithPrefix())
		if err != nil || len(r.Kvs) != 1 {
			t.Fatalf("queue of %s: %v %v", f.keys[i], r, err)
		}
		if r.Kvs[0].Lease == first.Load() {
			t.Errorf("entry of %s on the expired lease", f.keys[i])
		}
	}
	m.Unlock(f.ctx)
}

// TestAudit43SetRequestTooLarge: over a server whose --max-request-bytes
// (16 KiB) is below a set's write (10 keys of 1000 bytes) but above
// each key's own grant, TryLockMany of the free keys must take them (one
// by one: the set is not atomic here), not fail with etcd's "request is
// too large"; nothing of the refused write is left.
func TestAudit43SetRequestTooLarge(t *testing.T) {
	e := testserver.StartEtcd(t, &testserver.EtcdOptions{MaxRequestBytes: 16 << 10})
	prefix := "dlock-test/big/"
	l := newTestLocker(t, e.Endpoints(), &Options{Prefix: prefix}, &netCut{})
	raw := rawClient(t, e.Endpoints())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var keys []string
	for i := range 10 {
		keys = append(keys, strings.Repeat("k", 996)+fmt.Sprintf("%04d", i))
	}
	m, err := l.TryLockMany(ctx, keys)
	if err != nil {
		t.Fatalf("TryLockMany of 10 free keys of 1000 bytes over --max-request-bytes 16 KiB: %v", err)
	}
	if m.Atomic() {
		t.Errorf("the set was taken in one step over a request limit below its write")
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := raw.Get(ctx, prefix+"q/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range r.Kvs {
		t.Errorf("left after the Unlock: %.60s...", kv.Key)
	}
}
