package etcd

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
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
