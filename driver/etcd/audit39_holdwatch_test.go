package etcd

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// audit39Window is the holder watch's delay when this audit was written:
// the tamperings below come within it.
const audit39Window = 100 * time.Millisecond

// audit39Open runs the audit's tests of open defects.
func audit39Open(t *testing.T) {
	t.Helper()
	if os.Getenv("DLOCK_AUDIT39_OPEN") != "1" {
		t.Skip("an open defect of audit 39 (DLOCK_AUDIT39_OPEN=1 runs it)")
	}
}

// audit39Hold is a holder A (renewal off, so that only its watch can end
// it early) and a contender B on one key, A granted on a spare.
type audit39Hold struct {
	raw    *clientv3.Client
	a, b   *lock.Locker
	key    string
	entry  string // A's entry's key (the queue has only it)
	lease  *lock.Lease
	grant  time.Time
	closed chan time.Time
}

// newAudit39Hold grants A on a spare made age before.
func newAudit39Hold(t *testing.T, ttl, age time.Duration) *audit39Hold {
	t.Helper()
	e := testserver.SharedEtcd(t)
	prefix := fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())
	opts := &Options{Prefix: prefix, Options: lock.Options{TTL: ttl, DisableAutoRenew: true}}
	h := &audit39Hold{
		raw: rawClient(t, e.Endpoints()),
		a:   newTestLocker(t, e.Endpoints(), opts, &netCut{}),
		b:   newTestLocker(t, e.Endpoints(), opts, &netCut{}),
		key: "audit39-holdwatch",
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	warm, err := h.a.Lock(ctx, h.key) // leaves a spare: the next grant is fast
	if err != nil {
		t.Fatal(err)
	}
	warm.Unlock(ctx)
	time.Sleep(age)
	h.lease, err = h.a.Lock(ctx, h.key)
	h.grant = time.Now()
	if err != nil {
		t.Fatal(err)
	}
	q := prefix + "q/" + escape(h.key) + "/"
	resp, err := h.raw.Get(ctx, q, clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the queue: %v, %v; want A's entry alone", resp, err)
	}
	h.entry = string(resp.Kvs[0].Key)
	h.closed = make(chan time.Time, 1)
	go func() {
		<-h.lease.Done()
		h.closed <- time.Now()
	}()
	return h
}

// contend has B take the key and reports when it was granted, and
// whether A's Done had closed by then.
func (h *audit39Hold) contend(t *testing.T) (granted time.Time, doneAt time.Time, doneBefore bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lb, err := h.b.Lock(ctx, h.key)
	granted = time.Now()
	if err != nil {
		t.Fatalf("B.Lock: %v", err)
	}
	defer lb.Unlock(ctx)
	select {
	case doneAt = <-h.closed:
		return granted, doneAt, doneAt.Before(granted)
	default:
		return granted, time.Time{}, false
	}
}

// waitDone waits up to d for A's Done.
func (h *audit39Hold) waitDone(d time.Duration) (time.Time, bool) {
	select {
	case at := <-h.closed:
		h.closed <- at
		return at, true
	case <-time.After(d):
		return time.Time{}, false
	}
}

// TestAudit39DeleteWithinWatchDelay: A's entry is deleted behind its back
// a few milliseconds after its grant (before its holder watch exists):
// the watch, made from the grant's next revision, must still see the
// deletion, and A's Done close within the delay and a round trip, with
// renewal off (nothing else would end it before its deadline).
func TestAudit39DeleteWithinWatchDelay(t *testing.T) {
	h := newAudit39Hold(t, 20*time.Second, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := h.raw.Delete(ctx, h.entry); err != nil {
		t.Fatal(err)
	}
	deleted := time.Since(h.grant)
	if deleted >= audit39Window {
		t.Skipf("the delete came %v after the grant, not within %v (a starved machine)", deleted, audit39Window)
	}
	at, ok := h.waitDone(2 * time.Second)
	if !ok {
		t.Fatalf("A's entry deleted %v after its grant: Done still open 2s later", deleted)
	}
	t.Logf("deleted %v after the grant; Done %v after the grant", deleted, at.Sub(h.grant))
	h.raw.Delete(ctx, h.entry)
}

// TestAudit39DeleteThenCompactWithinWatchDelay: as above, but the store
// is compacted past the deletion before the holder watch is made (an
// operator's compaction, or --auto-compaction-mode=revision on a busy
// cluster). The watch is then refused as compacted and made again from
// the compaction revision, where it cannot see the deletion: the holder
// must read its entry then (checkHolder) and end its lease, for B is
// granted the key at once. Without that read A's Done stayed open until
// its deadline (renewal off) or its next renewal, 3 runs in 3.
func TestAudit39DeleteThenCompactWithinWatchDelay(t *testing.T) {
	h := newAudit39Hold(t, 20*time.Second, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := h.raw.Delete(ctx, h.entry); err != nil {
		t.Fatal(err)
	}
	put, err := h.raw.Put(ctx, "dlock-test/audit39-compact-probe", "x") // outside the queue
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.raw.Compact(ctx, put.Header.Revision); err != nil {
		t.Fatal(err)
	}
	if after := time.Since(h.grant); after >= audit39Window {
		t.Skipf("the delete and compaction came %v after the grant, not within %v", after, audit39Window)
	}
	if at, ok := h.waitDone(2 * time.Second); !ok {
		granted, _, _ := h.contend(t)
		t.Errorf("A's entry deleted, and compacted past, within %v of its grant: Done still open 2 s later; B granted %v after A's grant; A's deadline %v after its grant",
			audit39Window, granted.Sub(h.grant), h.lease.Deadline().Sub(h.grant))
	} else {
		t.Logf("Done %v after the grant", at.Sub(h.grant))
	}
}

// TestAudit39CrashWithinWatchDelay: A's Locker is cut off a few
// milliseconds after the grant (no watch yet, none ever to be made):
// A's Done must close, at its deadline, before B is granted on the
// lease's expiry. A's grant is on a spare made 0.7 s before, whose
// validity is what is left of it.
func TestAudit39CrashWithinWatchDelay(t *testing.T) {
	h := newAudit39Hold(t, 3*time.Second, 700*time.Millisecond)
	c, _ := cuts.Load(h.a)
	c.(*netCut).setDown(true)
	granted, doneAt, before := h.contend(t)
	if !before {
		t.Fatalf("A's Done (at %v after its grant, zero: open) not before B's grant (%v after A's grant); A's deadline %v after",
			doneAt.Sub(h.grant), granted.Sub(h.grant), h.lease.Deadline().Sub(h.grant))
	}
	t.Logf("A's Done %v, B granted %v after A's grant", doneAt.Sub(h.grant), granted.Sub(h.grant))
}
