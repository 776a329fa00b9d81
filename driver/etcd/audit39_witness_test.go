package etcd

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// audit39Witness is an external witness of one key's holds: at most one
// at a time, and tokens rising in the order it sees them.
type audit39Witness struct {
	mu      sync.Mutex
	holding int
	last    uint64
	holds   int
	bad     []string
}

func (w *audit39Witness) enter(who string, tok uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.holding++
	w.holds++
	if w.holding != 1 {
		w.bad = append(w.bad, fmt.Sprintf("%s entered with %d holders (token %d)", who, w.holding, tok))
	}
	if tok <= w.last {
		w.bad = append(w.bad, fmt.Sprintf("%s: token %d after %d", who, tok, w.last))
	}
	w.last = max(w.last, tok)
}

func (w *audit39Witness) leave() {
	w.mu.Lock()
	w.holding--
	w.mu.Unlock()
}

func (w *audit39Witness) fail(s string) {
	w.mu.Lock()
	w.bad = append(w.bad, s)
	w.mu.Unlock()
}

// TestAudit39WitnessLossyFastGrants: three Lockers take one key by turns
// (two through a proxy that loses the reply of one grant write in four:
// fast grants, woken waiters' fast steps and read-first grants alike,
// the write applied), holding it for 0 to 160 ms, across the holder
// watch's delay. The witness sees one holder at a time and rising
// tokens; no holder loses its grant; nothing is left after.
func TestAudit39WitnessLossyFastGrants(t *testing.T) {
	e := testserver.SharedEtcd(t)
	prefix := fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())
	p := newLossyProxy(t, strings.TrimPrefix(e.Endpoints()[0], "http://"))
	grant := grantTxn(prefix)
	var carried atomic.Int64
	p.losing(func(r *pb.TxnRequest) bool { return grant(r) && carried.Add(1)%4 == 0 })
	ttl := 3 * time.Second
	// Two Lockers only through p, so that their grants meet its losses
	// (with two endpoints, round-robin's parity can keep every grant off
	// p: make test saw 187 holds and no reply lost); a resend goes to p
	// again, and passes unless it is a fourth.
	through := func() *lock.Locker {
		return newTestLocker(t, []string{p.addr()}, &Options{Prefix: prefix, Options: lock.Options{TTL: ttl}}, &netCut{})
	}
	ls := []*lock.Locker{
		through(),
		through(),
		newTestLocker(t, e.Endpoints(), &Options{Prefix: prefix, Options: lock.Options{TTL: ttl}}, &netCut{}),
	}
	raw := rawClient(t, e.Endpoints())
	k := "audit39-witness"
	w := &audit39Witness{}
	var errs atomic.Int64
	stop := time.Now().Add(15 * time.Second)
	var wg sync.WaitGroup
	for i, l := range ls {
		for j := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				who := fmt.Sprintf("locker %d worker %d", i, j)
				rng := rand.New(rand.NewPCG(uint64(i), uint64(j)))
				for time.Now().Before(stop) {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					h, err := l.Lock(ctx, k)
					if err != nil {
						errs.Add(1)
						cancel()
						continue
					}
					w.enter(who, h.Token())
					time.Sleep(time.Duration(rng.IntN(160)) * time.Millisecond)
					if err := h.Err(); err != nil {
						w.fail(fmt.Sprintf("%s lost its grant (token %d): %v", who, h.Token(), err))
					}
					w.leave()
					h.Unlock(ctx)
					cancel()
				}
			}()
		}
	}
	wg.Wait()
	t.Logf("%d holds, %d failed Locks, %d grant replies lost", w.holds, errs.Load(), p.lost.Load())
	for _, b := range w.bad {
		t.Error(b)
	}
	if w.holds < 20 || p.lost.Load() == 0 {
		t.Errorf("%d holds, %d replies lost: the attack did not happen", w.holds, p.lost.Load())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	deadline := time.Now().Add(5 * time.Second) // background clean-ups
	for {
		r, err := raw.Get(ctx, prefix+"q/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Kvs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after every Unlock, %d entries are left: %s", len(r.Kvs), r.Kvs[0].Key)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
