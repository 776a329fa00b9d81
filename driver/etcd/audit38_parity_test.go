package etcd

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
)

// TestAudit38PlaceRepliesLostOnOneOfTwo (open finding): a Locker given
// two endpoints, one of which applies every write but loses the replies
// to a waiter's place (a member whose answers come after the try's
// bound). A place is two requests, a lease and its write, and the write
// is made once: the step after a lost reply sends its write to the same
// endpoint again (round-robin over two), so the waiter never learns its
// place, although the other endpoint answers everything, and the Lock
// fails when the ride-out (15 s) ends. The grant's write, sent again at
// once to the next endpoint, does not have this problem. Whether the
// steps after a lost place keep to that endpoint depends on how many
// other requests the client makes meanwhile: it failed 1 run in 3 (the
// Lock failed after 18.8 s, 9 place replies lost). Set
// DLOCK_AUDIT38_OPEN=1 to run it.
func TestAudit38PlaceRepliesLostOnOneOfTwo(t *testing.T) {
	if os.Getenv("DLOCK_AUDIT38_OPEN") == "" {
		t.Skip("an open finding (fails today): set DLOCK_AUDIT38_OPEN=1")
	}
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
