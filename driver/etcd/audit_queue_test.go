package etcd

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
)

// TestAuditDeadWaiterBlocksQueue (finding: a dead waiter keeps its place
// for its whole TTL). A waiter's entry is on a lease of max(⌈TTL⌉, 3) s,
// so a waiter that dies (or is cut off: its Leave cannot reach etcd)
// keeps its place for up to the TTL, not the 3 s of C4's "a dead
// waiter's place in a queue dies too". When the holder releases, the
// dead waiter is first in line and never takes the key; everyone behind
// it waits for its lease (here 20 s) although nobody holds the key.
func TestAuditDeadWaiterBlocksQueue(t *testing.T) {
	e := testserver.SharedEtcd(t)
	prefix := fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())
	opts := &Options{Prefix: prefix, Options: lock.Options{TTL: 20 * time.Second}}
	holder := newTestLocker(t, e.Endpoints(), opts, &netCut{})
	cut := &netCut{}
	dead := newTestLocker(t, e.Endpoints(), opts, cut)
	next := newTestLocker(t, e.Endpoints(), opts, &netCut{})
	raw := rawClient(t, e.Endpoints())
	k := "audit-dead-waiter"
	queue := MutexPrefix(prefix, k) + "/"
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	h, err := holder.Lock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		if l, err := dead.Lock(ctx, k); err == nil {
			l.Unlock(ctx)
		}
	}()
	waitEntries(t, raw, queue, 2)
	got := make(chan error, 1)
	var nl *lock.Lease
	go func() {
		var err error
		nl, err = next.Lock(ctx, k)
		got <- err
	}()
	waitEntries(t, raw, queue, 3)
	cut.setDown(true) // the waiter dies: its connections drop, nothing is left
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	freedAt := time.Now()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("next granted %v after the release", time.Since(freedAt))
		nl.Unlock(ctx)
	case <-time.After(6 * time.Second):
		err := <-got
		t.Fatalf("the key was free and the only live waiter was not granted it within 6 s (3 s after a dead waiter's place should die, plus slack): granted %v after the release (err %v); the dead waiter's place lived on its %v lease",
			time.Since(freedAt), err, opts.TTL)
	}
}

// TestAuditURLBadPortAccepted (finding: a malformed URL is accepted).
// url.Parse checks only the port after the last colon of the host, so in
// etcd://h1:xyz,h2:2379 the first server's port "xyz" is not checked;
// parseURL's SplitHostPort accepts it, and the Locker is made, failing
// only at its first call (C9: a malformed URL is ErrInvalid, before any
// I/O). So is an empty port ("h1:").
func TestAuditURLBadPortAccepted(t *testing.T) {
	ctx := context.Background()
	for _, bad := range []string{
		"etcd://h1:xyz,h2:2379/x",
		"etcd://h1:,h2:2379/x",
		"etcd://h1:99999,h2:2379/x",
	} {
		l, err := lock.Open(ctx, bad)
		if err == nil {
			l.Close()
			t.Errorf("lock.Open(%q) = a Locker, want ErrInvalid", bad)
			continue
		}
		if !errors.Is(err, lock.ErrInvalid) {
			t.Errorf("lock.Open(%q): %v, want ErrInvalid", bad, err)
		}
	}
}
