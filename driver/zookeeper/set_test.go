package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/go-zookeeper/zk"
)

// A set is judged by every key's queue, whoever made its nodes: a plain
// create by another client (zk.Lock's "lock-" node) moves no version a
// multi's check could test, and still blocks the set, which then leaves
// no node behind. Once it is gone the set is taken in one multi: one
// token (its zxid) for every key, above the foreign node's.
func TestSetJudgedByQueue(t *testing.T) {
	h := newHarness(t, testserver.SharedZooKeeper(t).Addrs(), testSessionTimeout)
	l := h.NewLocker(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	base := fmt.Sprintf("set-queue/%d", time.Now().UnixNano())
	keys := []string{base + "/a", base + "/b", base + "/c"}
	kp := h.kp(keys[1])
	for _, p := range []string{testRoot, h.kp(base), kp} {
		if _, err := h.raw.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			t.Fatal(err)
		}
	}
	foreign, err := h.raw.Create(kp+"/lock-", nil, zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
	if err != nil {
		t.Fatal(err)
	}
	_, fst, err := h.raw.Exists(foreign)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryLockMany(ctx, keys); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("TryLockMany over a zk.Lock node: %v, want ErrHeld", err)
	}
	for _, k := range keys {
		dump, err := h.Dump(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if left := strings.Count(strings.Join(dump, "\n"), protectedPrefix); left != 0 {
			t.Errorf("key %s after a refused set: %d dlock nodes left:\n%s", k, left, strings.Join(dump, "\n"))
		}
	}
	if err := h.raw.Delete(foreign, -1); err != nil {
		t.Fatal(err)
	}
	m, err := l.TryLockMany(ctx, keys)
	if err != nil {
		t.Fatalf("TryLockMany of the free set: %v", err)
	}
	defer m.Unlock(ctx)
	if !m.Atomic() {
		t.Errorf("the set was not taken in one step")
	}
	for _, ls := range m.Leases() {
		if tok := ls.Token(); tok != m.Leases()[0].Token() || tok <= uint64(fst.Czxid) {
			t.Errorf("token of %s: %d; want the multi's zxid, one for all (%d), above the foreign node's czxid %d", ls.Key(), tok, m.Leases()[0].Token(), fst.Czxid)
		}
	}
}
