package etcd

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/lock"
)

// TestAudit38PlaceRepliesLostOnOneOfTwo: a Locker given two endpoints,
// one of which applies every write but loses the replies to a waiter's
// place (a member whose answers come after the try's bound). The place's
// write was made once, and round-robin over two endpoints could send the
// step after a lost reply to the same endpoint again, so the waiter never
// learned its place and the Lock failed when the ride-out (15 s) ended
// (1 run in 3: after 18.8 s, 9 place replies lost). The write is now sent
// again at once to the next endpoint, as a grant's is, and a try that
// landed is adopted on its own lease.
func TestAudit38PlaceRepliesLostOnOneOfTwo(t *testing.T) {
	e := testserver.SharedEtcd(t)
	prefix := fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())
	p := newLossyProxy(t, strings.TrimPrefix(e.Endpoints()[0], "http://"))
	opts := &Options{Prefix: prefix, Options: lock.Options{TTL: 5 * time.Second}}
	other := newTestLocker(t, e.Endpoints(), opts, &netCut{})
	p.losing(placeTxn(prefix))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Second)
	defer cancel()
	k := "audit38-place-parity"

	// gRPC's round-robin starts at a random endpoint: a new Locker a
	// round until its first place goes to p
	for round := 0; ; round++ {
		if round == 8 {
			t.Fatal("no waiter's place went to the losing endpoint in 8 rounds: the attack did not happen")
		}
		l := newTestLocker(t, []string{p.addr(), e.Endpoints()[0]}, opts, &netCut{})
		h, err := other.Lock(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		lost := p.lost.Load()
		got := make(chan error, 1)
		var w *lock.Lease
		start := time.Now()
		go func() {
			var err error
			w, err = l.Lock(ctx, k)
			got <- err
		}()
		time.Sleep(3 * time.Second)
		if err := h.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		err = <-got
		if err == nil {
			w.Unlock(ctx)
		}
		if p.lost.Load() == lost {
			continue
		}
		if err != nil {
			t.Fatalf("a queued Lock, %d place replies lost on one endpoint of two, after %v: %v", p.lost.Load()-lost, time.Since(start).Round(time.Millisecond), err)
		}
		return
	}
}
