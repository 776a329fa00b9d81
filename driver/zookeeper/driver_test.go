package zookeeper

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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

// newTestDriver dials a driver for tests of the SPI itself.
func newTestDriver(t *testing.T, servers []string, o *Options) *zkDriver {
	t.Helper()
	if o == nil {
		o = &Options{Root: testRoot, SessionTimeout: testSessionTimeout}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	d, _, err := dial(ctx, servers, o)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func newLease(key string, mode driver.Mode) *driver.Lease {
	var b [16]byte
	rand.Read(b[:])
	return &driver.Lease{Key: key, Owner: hex.EncodeToString(b[:]), Mode: mode, TTL: time.Second, Lost: func(error) {}}
}

// TestTokenIsCzxid: the fencing token is the lock node's czxid, for
// exclusive and shared grants, and the node is named as zk.Lock names its
// nodes.
func TestTokenIsCzxid(t *testing.T) {
	servers := testserver.SharedZooKeeper(t).Addrs()
	d := newTestDriver(t, servers, nil)
	raw, _ := rawConn(t, servers, testSessionTimeout, nil)
	ctx := context.Background()
	k := uniqueKey(t)
	for _, mode := range []driver.Mode{driver.Shared, driver.Shared, driver.Exclusive} {
		l := newLease(k, mode)
		if mode == driver.Exclusive {
			// The key is free: Join grants at once.
			if err := d.Join(ctx, l, make(chan struct{}, 1)); err != nil {
				t.Fatalf("Join: %v", err)
			}
		} else if err := d.Acquire(ctx, l); err != nil {
			t.Fatalf("Acquire(%v): %v", mode, err)
		}
		g := l.Data.(*grant)
		ok, st, err := raw.Exists(g.path)
		if err != nil || !ok {
			t.Fatalf("Exists(%s): %v %v", g.path, ok, err)
		}
		if uint64(st.Czxid) != l.Token {
			t.Errorf("%v token %d, czxid %d", mode, l.Token, st.Czxid)
		}
		want := keyPath(testRoot, k) + "/_c_" + l.Owner + map[driver.Mode]string{driver.Exclusive: "-lock-", driver.Shared: "-read-lock-"}[mode]
		if !strings.HasPrefix(g.path, want) || len(g.path) != len(want)+10 {
			t.Errorf("node %s, want %s<10-digit sequence>", g.path, want)
		}
		// The session timeout, whatever the TTL, counted from the last
		// moment the leader surely heard from the session (at most half
		// the timeout before the call: see ensureProof).
		if st := d.sessionTimeout(); l.Validity > st || l.Validity < st/2 {
			t.Errorf("validity %v, want at most the session timeout %v and at least half of it, whatever the TTL (%v)", l.Validity, st, l.TTL)
		}
		if mode == driver.Shared {
			if err := d.Release(ctx, l); err != nil {
				t.Fatalf("Release: %v", err)
			}
		} else {
			defer d.Release(ctx, l)
		}
	}
}

// TestRefreshBatch: one multi refreshes many leases; a lease whose node
// was deleted gets ErrNotHeld, the others succeed. The validity, whatever
// the TTL, is counted from the session's last proof: the multi proves
// earlier requests to the leader, not itself.
func TestRefreshBatch(t *testing.T) {
	servers := testserver.SharedZooKeeper(t).Addrs()
	d := newTestDriver(t, servers, nil)
	raw, _ := rawConn(t, servers, testSessionTimeout, nil)
	ctx := context.Background()
	var ls []*driver.Lease
	for i := range 5 {
		l := newLease(fmt.Sprintf("%s/%d", uniqueKey(t), i), driver.Exclusive)
		if err := d.Acquire(ctx, l); err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	begin := time.Now()
	validity, errs := d.RefreshBatch(ctx, ls, time.Minute)
	d.mon.mu.Lock()
	proof := d.mon.proofAt
	d.mon.mu.Unlock()
	timeout := d.sessionTimeout()
	if validity <= 0 || validity > timeout {
		t.Errorf("validity %v, want within (0, %v], the session timeout: the TTL asked for, a minute, is longer", validity, timeout)
	}
	if lease, monitor := begin.Add(validity-driver.DriftMargin(validity)), proof.Add(timeout-driver.DriftMargin(timeout)); lease.After(monitor) {
		t.Errorf("validity %v gives a deadline %v after the session's last proof plus its timeout (less the margin)", validity, lease.Sub(monitor))
	}
	for i, err := range errs {
		if err != nil {
			t.Errorf("lease %d: %v", i, err)
		}
	}
	if err := raw.Delete(ls[2].Data.(*grant).path, -1); err != nil {
		t.Fatal(err)
	}
	_, errs = d.RefreshBatch(ctx, ls, time.Second)
	for i, err := range errs {
		if i == 2 && !errors.Is(err, driver.ErrNotHeld) {
			t.Errorf("lease of the deleted node: err = %v, want ErrNotHeld", err)
		}
		if i != 2 && err != nil {
			t.Errorf("lease %d: %v", i, err)
		}
	}
	for i, l := range ls {
		err := d.Release(ctx, l)
		if i == 2 && !errors.Is(err, driver.ErrNotHeld) || i != 2 && err != nil {
			t.Errorf("Release %d: %v", i, err)
		}
	}
}

// TestDigestACL: with a digest identity, the nodes the driver creates
// carry its ACL, so another identity can neither delete a lock node nor
// queue on the key, while Lockers with the identity work as usual.
func TestDigestACL(t *testing.T) {
	zkSrv := testserver.SharedZooKeeper(t)
	root := fmt.Sprintf("/dlock-acl-%d", time.Now().UnixNano())
	url := fmt.Sprintf("zookeeper://alice:s3cret@%s%s?session_timeout=2s", strings.Join(zkSrv.Addrs(), ","), root)
	ctx := context.Background()
	a, err := lock.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	k := uniqueKey(t)
	lease, err := a.Lock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	var conn *zk.Conn
	if !a.As(&conn) {
		t.Fatal("lock.As(**zk.Conn) failed")
	}
	kp := keyPath(root, k)
	children, _, err := conn.Children(kp)
	if err != nil || len(children) != 1 {
		t.Fatalf("children of %s: %q, %v", kp, children, err)
	}
	node := kp + "/" + children[0]
	acl, _, err := conn.GetACL(node)
	if want := zk.DigestACL(zk.PermAll, "alice", "s3cret"); err != nil || len(acl) != 1 || acl[0] != want[0] {
		t.Errorf("ACL of %s: %v, %v; want %v", node, acl, err, want)
	}

	for name, auth := range map[string]string{"anonymous": "", "another identity": "mallory:guess"} {
		other, _ := rawConn(t, zkSrv.Addrs(), 2*time.Second, nil)
		if auth != "" {
			if err := other.AddAuth("digest", []byte(auth)); err != nil {
				t.Fatal(err)
			}
		}
		if err := other.Delete(node, -1); !errors.Is(err, zk.ErrNoAuth) {
			t.Errorf("%s deleting the lock node: err = %v, want zk.ErrNoAuth", name, err)
		}
		if _, err := other.Create(kp+"/_c_x-lock-", nil, zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll)); !errors.Is(err, zk.ErrNoAuth) {
			t.Errorf("%s queueing on the key: err = %v, want zk.ErrNoAuth", name, err)
		}
	}

	b, err := lock.Open(ctx, url) // the same identity
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.TryLock(ctx, k); !errors.Is(err, lock.ErrNotAcquired) {
		t.Errorf("TryLock of a held key by the same identity: %v", err)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	lb, err := b.TryLock(ctx, k)
	if err != nil {
		t.Fatalf("TryLock after Unlock: %v", err)
	}
	lb.Unlock(ctx)

	// The root the digest identity created stays open to other identities'
	// keys: the digest ACL guards alice's keys, not the whole root.
	anon, err := lock.Open(ctx, fmt.Sprintf("zookeeper://%s%s?session_timeout=2s", strings.Join(zkSrv.Addrs(), ","), root))
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	la, err := anon.TryLock(ctx, k+"-anonymous")
	if err != nil {
		t.Fatalf("an anonymous Locker's own key under the root alice created: %v", err)
	}
	la.Unlock(ctx)
}

// TestForeignKeyNode: where a key node made by another client lets this
// identity create and delete children but not write the key node, the
// driver falls back from the create+setData multi to a plain create, and
// the token is still the czxid.
func TestForeignKeyNode(t *testing.T) {
	servers := testserver.SharedZooKeeper(t).Addrs()
	d := newTestDriver(t, servers, nil)
	raw, _ := rawConn(t, servers, testSessionTimeout, nil)
	ctx := context.Background()
	k := uniqueKey(t)
	kp := keyPath(testRoot, k)
	// The root may not exist yet when this test runs alone.
	if _, err := raw.Create(testRoot, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		t.Fatal(err)
	}
	if _, err := raw.Create(kp, nil, 0, zk.WorldACL(zk.PermCreate|zk.PermRead|zk.PermDelete)); err != nil {
		t.Fatal(err)
	}
	defer raw.Delete(kp, -1)
	for range 2 {
		l := newLease(k, driver.Exclusive)
		if err := d.Acquire(ctx, l); err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		_, st, err := raw.Exists(l.Data.(*grant).path)
		if err != nil || uint64(st.Czxid) != l.Token {
			t.Errorf("token %d, czxid %d (%v)", l.Token, st.Czxid, err)
		}
		if err := d.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	if !d.plainCreate.Load() {
		t.Errorf("the driver did not fall back to plain creates")
	}
}

// TestTokenUnderContention: with many clients creating nodes of one key at
// once, each token is its node's czxid, and no two are equal.
func TestTokenUnderContention(t *testing.T) {
	servers := testserver.SharedZooKeeper(t).Addrs()
	raw, _ := rawConn(t, servers, testSessionTimeout, nil)
	ctx := context.Background()
	k := uniqueKey(t)
	var ds []*zkDriver
	for range 4 {
		ds = append(ds, newTestDriver(t, servers, nil))
	}
	ls := make([]*driver.Lease, 40)
	errs := make(chan error, len(ls))
	for i := range ls {
		ls[i] = newLease(k, driver.Shared)
		go func() { errs <- ds[i%len(ds)].Acquire(ctx, ls[i]) }()
	}
	for range ls {
		if err := <-errs; err != nil {
			t.Fatalf("Acquire: %v", err)
		}
	}
	seen := map[uint64]bool{}
	for i, l := range ls {
		_, st, err := raw.Exists(l.Data.(*grant).path)
		if err != nil || uint64(st.Czxid) != l.Token {
			t.Errorf("reader %d: token %d, czxid %d (%v)", i, l.Token, st.Czxid, err)
		}
		if seen[l.Token] {
			t.Errorf("token %d given twice", l.Token)
		}
		seen[l.Token] = true
		ds[i%len(ds)].Release(ctx, l)
	}
}

// TestQueuedGrantValidityFromProof: a waiter's grant lasts as long as its
// session may, counted from the last proof that the session was alive (a
// write or sync), not from the listing that found the waiter first, which
// a follower answers without proving anything: the lease's Deadline never
// outlasts the session.
func TestQueuedGrantValidityFromProof(t *testing.T) {
	servers := testserver.SharedZooKeeper(t).Addrs()
	d := newTestDriver(t, servers, nil)
	waiter := lock.New(d, nil)
	defer waiter.Close()
	holder := lock.New(newTestDriver(t, servers, nil), nil)
	defer holder.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 3 {
		k := uniqueKey(t)
		h, err := holder.TryLock(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan *lock.Lease, 1)
		go func() {
			l, err := waiter.Lock(ctx, k)
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
		// The waiter's monitor proves the session every third of its
		// timeout; release between two proofs.
		time.Sleep(testSessionTimeout/2 + time.Duration(i)*testSessionTimeout/9)
		if err := h.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		l := <-got
		if l == nil {
			return
		}
		d.mon.mu.Lock()
		proof := d.mon.proofAt
		d.mon.mu.Unlock()
		if bound := proof.Add(d.sessionTimeout()); l.Deadline().After(bound) {
			t.Errorf("deadline %v after the session's last proof plus its timeout", l.Deadline().Sub(bound))
		}
		l.Unlock(ctx)
	}
}
