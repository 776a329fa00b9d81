package etcd

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// audit39LegacyGrant is a grant's counter write as a client before the
// 20-digit counters makes it: max(counter + 1, clock in µs), unpadded,
// if the counter's mod revision is the one read.
func audit39LegacyGrant(t *testing.T, raw *clientv3.Client, counter string, clock time.Time) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		g, err := raw.Get(ctx, counter)
		if err != nil {
			t.Fatal(err)
		}
		var cur uint64
		var mod int64
		if len(g.Kvs) == 1 {
			cur, mod = parseCounter(string(g.Kvs[0].Value)), g.Kvs[0].ModRevision
		}
		tok := max(cur+1, uint64(clock.UnixMicro()))
		r, err := raw.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(counter), "=", mod)).
			Then(clientv3.OpPut(counter, strconv.FormatUint(tok, 10))).Commit()
		if err != nil {
			t.Fatal(err)
		}
		if r.Succeeded {
			return tok
		}
	}
}

// TestAudit39MixedCounterFormats: one key's counter written by turns by
// this driver (20 digits) and by clients of the previous format (no
// leading zero, whose bytewise order is not the numbers'), some ahead
// of the clock: every grant, fast or read first, Acquire's or a woken
// waiter's fast step, takes a token above every one before it.
func TestAudit39MixedCounterFormats(t *testing.T) {
	e := testserver.SharedEtcd(t)
	raw := rawClient(t, e.Endpoints())
	d, r := testDriver(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	k := "audit39-mixed-counter"
	n := d.names(k)
	var last uint64
	rise := func(what string, tok uint64) {
		t.Helper()
		if tok <= last {
			t.Fatalf("%s: token %d after %d", what, tok, last)
		}
		last = tok
	}
	owner := 0
	acquire := func(ttl time.Duration) *driver.Lease {
		t.Helper()
		owner++
		l := &driver.Lease{Key: k, Owner: audit39Owner(owner), TTL: ttl}
		if err := d.Acquire(ctx, l); err != nil {
			t.Fatal(err)
		}
		return l
	}
	cycle := func(what string) {
		t.Helper()
		l := acquire(10 * time.Second)
		rise(what, l.Token)
		d.Release(ctx, l)
	}
	// woken is a waiter's grant (its fast step) after a holder, with
	// the counter written by write while it waits.
	woken := func(what string, write func()) {
		t.Helper()
		h := acquire(10 * time.Second)
		rise(what+" (holder)", h.Token)
		owner++
		w := &driver.Lease{Key: k, Owner: audit39Owner(owner), TTL: 10 * time.Second}
		var held *driver.HeldError
		if err := d.Join(ctx, w, make(chan struct{}, 1)); !errors.As(err, &held) {
			t.Fatalf("%s: Join: %v", what, err)
		}
		write()
		d.Release(ctx, h)
		for try := 0; ; try++ {
			err := d.Check(ctx, w)
			if err == nil {
				break
			}
			if !errors.As(err, &held) || try > 100 {
				t.Fatalf("%s: Check: %v", what, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		rise(what, w.Token)
		d.Release(ctx, w)
	}
	legacy := func(ahead time.Duration) func() {
		return func() { rise("legacy write", audit39LegacyGrant(t, raw, n.counter, time.Now().Add(ahead))) }
	}
	cycle("first")
	cycle("fast")
	// By turns at random, on one key; the legacy client's clock is
	// behind by up to a minute or ahead by up to 50 ms (so that the
	// driver's clock passes the counter again and its fast grant is
	// tried on both formats).
	rng := rand.New(rand.NewPCG(39, 39))
	fast := 0
	for i := range 60 {
		switch rng.IntN(4) {
		case 0:
			legacy(time.Duration(rng.Int64N(int64(time.Minute+50*time.Millisecond))) - time.Minute)()
		case 1:
			woken("a waiter", func() {})
		default:
			r.reset()
			cycle("round " + strconv.Itoa(i))
			if r.reset()["/etcdserverpb.KV/Txn"] == 2 {
				fast++
			}
		}
		time.Sleep(time.Duration(rng.IntN(30)) * time.Millisecond)
	}
	t.Logf("%d cycles of two KV/Txn (fast grants)", fast)
	if fast == 0 {
		t.Errorf("no fast grant among the random rounds")
	}
	legacy(time.Hour)()
	cycle("after an unpadded counter an hour ahead")
	if g, err := raw.Get(ctx, n.counter); err != nil || len(g.Kvs) != 1 || len(g.Kvs[0].Value) != counterWidth {
		t.Fatalf("the counter after a grant: %v %v; want %d digits", g, err, counterWidth)
	}
	legacy(0)()
	cycle("after an unpadded counter")
	woken("a waiter, the counter unpadded meanwhile", legacy(2*time.Hour))
	woken("a waiter, the counter padded ahead meanwhile", func() {
		v := last + uint64(time.Hour/time.Microsecond)
		if _, err := raw.Put(ctx, n.counter, counterValue(v)); err != nil {
			t.Fatal(err)
		}
		rise("padded write", v)
	})
	g, err := raw.Get(ctx, n.counter)
	if err != nil || len(g.Kvs) != 1 {
		t.Fatal(g, err)
	}
	if c := parseCounter(string(g.Kvs[0].Value)); c != last {
		t.Fatalf("the counter reads %d, the last token %d", c, last)
	}
}
