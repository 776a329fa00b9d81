package memcached

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
)

// dumpedItem is an item as memcached's "lru_crawler metadump all" lists
// it: its key and its expiry (Unix seconds on the server's clock; -1 for
// none).
type dumpedItem struct {
	key string
	exp int64
}

// metadump lists the live items of the memcached server at addr.
func metadump(addr string) ([]dumpedItem, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write([]byte("lru_crawler metadump all\r\n")); err != nil {
		return nil, err
	}
	var items []dumpedItem
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		line := sc.Text()
		if line == "END" {
			return items, nil
		}
		var it dumpedItem
		for _, f := range strings.Fields(line) {
			name, v, _ := strings.Cut(f, "=")
			switch name {
			case "key":
				if it.key, err = url.QueryUnescape(v); err != nil {
					return nil, fmt.Errorf("metadump: %q: %w", line, err)
				}
			case "exp":
				if it.exp, err = strconv.ParseInt(v, 10, 64); err != nil {
					return nil, fmt.Errorf("metadump: %q: %w", line, err)
				}
			}
		}
		if it.key == "" {
			return nil, fmt.Errorf("metadump: %q", line)
		}
		items = append(items, it)
	}
	return nil, errors.Join(errors.New("metadump: no END"), sc.Err())
}

// useKeyOnce uses key once as the i-th of a mixed workload: a lease and a
// named owner's two holds released; a grant of the dead Locker, left to
// expire; a wait behind a holder given up; a TryLock refused.
func useKeyOnce(t *testing.T, live, dead *lock.Locker, i int, key string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var leases []*lock.Lease
	take := func(l *lock.Lease, err error) {
		if err != nil {
			t.Errorf("%s: %v", key, err)
			return
		}
		leases = append(leases, l)
	}
	switch i % 5 {
	case 0:
		take(live.Lock(ctx, key))
	case 1:
		take(live.Lock(ctx, key, lock.WithOwner("job-"+key)))
		take(live.Lock(ctx, key, lock.WithOwner("job-"+key)))
	case 2:
		if _, err := dead.Lock(ctx, key); err != nil {
			t.Errorf("%s: Lock: %v", key, err)
		}
		return // the Locker is cut off below: its grant expires
	case 3, 4:
		take(live.Lock(ctx, key))
		var err error
		if i%5 == 3 {
			wctx, wcancel := context.WithTimeout(ctx, 50*time.Millisecond)
			_, err = live.Lock(wctx, key)
			wcancel()
		} else {
			_, err = live.TryLock(ctx, key)
		}
		if !errors.Is(err, lock.ErrNotAcquired) {
			t.Errorf("%s: an attempt behind a holder gave %v", key, err)
		}
	}
	for _, l := range leases {
		if err := l.Unlock(ctx); err != nil {
			t.Errorf("%s: Unlock: %v", key, err)
		}
	}
}

// TestAudit38KeysUsedOnceLeaveExpiringCounters: 1,000 keys used once
// (released, a named owner's holds, left to expire, waits given up, TryLock
// refused) leave no lock item once the dead Locker's grants expired, and
// nothing but one fencing counter per key, each expiring counterLife after
// its creation: nothing that lives forever.
func TestAudit38KeysUsedOnceLeaveExpiringCounters(t *testing.T) {
	m := testserver.StartMemcached(t, nil)
	addr := m.Addrs()[0]
	h := newHarness(m.Addrs())
	live := h.NewLocker(t, &lock.Options{TTL: MinTTL})
	dead := h.NewLocker(t, &lock.Options{TTL: MinTTL})
	const n, workers = 1000, 8
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				useKeyOnce(t, live, dead, i, fmt.Sprintf("audit38-once-%d", i))
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	h.Crash(t, dead)
	if err := live.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// The dead Locker's grants expire within their 3 s on memcached's
	// clock.
	var items []dumpedItem
	var locks int
	for deadline := time.Now().Add(60 * time.Second); ; {
		var err error
		if items, err = metadump(addr); err != nil {
			t.Fatal(err)
		}
		locks = 0
		for _, it := range items {
			if strings.HasPrefix(it.key, DefaultPrefix+"l") {
				locks++
			}
		}
		if locks == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if locks > 0 {
		t.Errorf("%d lock items left 60 s after the last grant of a %v TTL", locks, MinTTL)
	}
	now := time.Now().Unix()
	var counters, forever int
	for _, it := range items {
		switch {
		case it.exp < 0:
			forever++
			t.Errorf("item %q never expires", it.key)
		case strings.HasPrefix(it.key, DefaultPrefix+"c"):
			counters++
			if left := it.exp - now; left > counterLife+60 {
				t.Errorf("counter %q expires in %d s, more than %d", it.key, left, counterLife)
			}
		}
	}
	t.Logf("%d keys used once left %d items: %d lock items, %d counters (each expiring within %d s), %d that never expire", n, len(items), locks, counters, counterLife, forever)
	if counters > n {
		t.Errorf("%d counters for %d keys", counters, n)
	}
}

// TestAudit38TokenAfterCounterExpiry: a key used again after its residue,
// the counter, expired (deleted here, as its expiry would) gets a larger
// token: the new counter is seeded from the clock in microseconds, which
// passed the old counter (its seed plus one per grant) long before the
// counter's week ran out.
func TestAudit38TokenAfterCounterExpiry(t *testing.T) {
	h := newHarness(testserver.SharedMemcached(t).Addrs())
	l := h.NewLocker(t, &lock.Options{TTL: MinTTL})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const key = "audit38-token"
	var last uint64
	for i := range 3 {
		lease, err := l.Lock(ctx, key)
		if err != nil {
			t.Fatalf("Lock: %v", err)
		}
		if lease.Token() <= last {
			t.Fatalf("grant %d after the counter expired: token %d, before %d", i, lease.Token(), last)
		}
		last = lease.Token()
		if err := lease.Unlock(ctx); err != nil {
			t.Fatalf("Unlock: %v", err)
		}
		if left, err := h.Residue(ctx, key); err != nil || len(left) > 0 {
			t.Fatalf("after Unlock: %q, %v", left, err)
		}
		if err := h.DeleteCounter(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
}
