package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"

	"github.com/dlock-go/dlock/driver/drivertest"
	"github.com/go-zookeeper/zk"
)

// inspectCaps: a lock node's name, czxid and ctime tell everything but
// how long its grant lasts, which is as long as its session.
var inspectCaps = &drivertest.InspectCaps{Tokens: true, SharedTokens: true, Since: true, Waiters: true, WaiterSince: true}

// Dump lists the key node and its children, after a sync, each with its
// data and the versions and zxids that any change to it moves.
func (h *harness) Dump(ctx context.Context, key string) ([]string, error) {
	kp := h.kp(key)
	if _, err := h.raw.Sync(kp); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return nil, err
	}
	out := []string{}
	node := func(path string) error {
		data, st, err := h.raw.Get(path)
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if err != nil {
			return err
		}
		out = append(out, fmt.Sprintf("%s %q czxid=%d mzxid=%d pzxid=%d version=%d cversion=%d children=%d owner=%x",
			path, data, st.Czxid, st.Mzxid, st.Pzxid, st.Version, st.Cversion, st.NumChildren, st.EphemeralOwner))
		return nil
	}
	if err := node(kp); err != nil {
		return nil, err
	}
	children, _, err := h.raw.Children(kp)
	if errors.Is(err, zk.ErrNoNode) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	slices.Sort(children)
	for _, c := range children {
		if err := node(kp + "/" + c); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Nodes made by hand, as other clients and dlock name them, are judged by
// the driver's grant rule: in sequence order, the permits of 2 before any
// other node hold the key, up to 2; the rest wait, first in line first.
// Other clients' nodes are foreign and exclusive; every token is the
// node's czxid and every Since its ctime. Inspect changes nothing.
func TestInspectNodes(t *testing.T) {
	h := newHarness(t, testserver.SharedZooKeeper(t).Addrs(), testSessionTimeout)
	l := h.NewLocker(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i, tc := range []struct {
		nodes   []string // in creation order
		holders []string // owner (or name prefix) and mode, in order
		waiters []string
	}{{
		nodes:   []string{owner('a') + "-permit-2-lock-", owner('b') + "-permit-2-lock-", owner('c') + "-permit-2-lock-", owner('d') + "-lock-", owner('e') + "-read-lock-"},
		holders: []string{"a permit 2", "b permit 2"},
		waiters: []string{"c permit 2", "d exclusive 0", "e shared 0"},
	}, {
		nodes:   []string{owner('a') + "-read-lock-", owner('b') + "-read-lock-", "lock-", owner('c') + "-read-lock-"},
		holders: []string{"a shared 0", "b shared 0"},
		waiters: []string{"lock- exclusive 0", "c shared 0"},
	}, {
		nodes:   []string{"_c_0b9ac8ee-0d8c-4bb8-8d1c-58a45de3b9b2-lock-", owner('a') + "-lock-"},
		holders: []string{"_c_0b9ac8ee-0d8c-4bb8-8d1c-58a45de3b9b2-lock- exclusive 0"},
		waiters: []string{"a exclusive 0"},
	}} {
		k := fmt.Sprintf("inspect-nodes/%d/%d", time.Now().UnixNano(), i)
		kp := h.kp(k)
		for _, p := range []string{testRoot, kp} {
			if _, err := h.raw.CreateContainer(p, nil, zk.FlagContainer, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
				t.Fatal(err)
			}
		}
		from := time.Now()
		var czxids []int64
		for _, n := range tc.nodes {
			path, err := h.raw.Create(kp+"/"+n, nil, zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
			if err != nil {
				t.Fatal(err)
			}
			_, s, err := h.raw.Exists(path)
			if err != nil {
				t.Fatal(err)
			}
			czxids = append(czxids, s.Czxid)
		}
		before, err := h.Dump(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		st, err := l.Inspect(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if after, err := h.Dump(ctx, k); err != nil || !slices.Equal(before, after) {
			t.Errorf("Inspect changed the key:\nbefore %q\nafter  %q (%v)", before, after, err)
		}
		var holders, waiters []string
		for j, hd := range st.Holders {
			holders = append(holders, fmt.Sprintf("%s %v %d", shortOwner(hd.Owner, hd.Foreign), hd.Mode, hd.Limit))
			if hd.Token != uint64(czxids[j]) || hd.Since.Before(from.Add(-2*time.Second)) || hd.Since.After(time.Now().Add(2*time.Second)) || hd.Remaining != 0 {
				t.Errorf("case %d: holder %d: %+v; want token %d, since about %v, no remaining time", i, j, hd, czxids[j], from)
			}
		}
		for _, w := range st.Waiters {
			waiters = append(waiters, fmt.Sprintf("%s %v %d", shortOwner(w.Owner, false), w.Mode, w.Limit))
		}
		if !slices.Equal(holders, tc.holders) || !slices.Equal(waiters, tc.waiters) || !st.Unknown.Remaining {
			t.Errorf("case %d: holders %q, waiters %q (unknown %+v); want %q, %q", i, holders, waiters, st.Unknown, tc.holders, tc.waiters)
		}
	}
}

// owner is a dlock node's protected prefix for an owner of 32 times c.
func owner(c byte) string { return "_c_" + strings.Repeat(string(c), 32) }

// shortOwner is an owner of 32 times one letter as that letter; a foreign
// node's name without its sequence number.
func shortOwner(o string, foreign bool) string {
	if foreign {
		return strings.TrimRight(o, "0123456789")
	}
	if len(o) == 32 && strings.Count(o, o[:1]) == 32 {
		return o[:1]
	}
	if strings.HasPrefix(o, "lock-") {
		return "lock-"
	}
	return o
}
