package redismix

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver/redisnx"
	"github.com/dlock-go/dlock/driver/rediswatch"
	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { testserver.Main(m) }

// rawClient is a plain client of the shared server, closed at cleanup.
func rawClient(t *testing.T) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: testserver.SharedRedis(t).Addr()})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

func lockers(t *testing.T) (nx, watch *lock.Locker) {
	srv := testserver.SharedRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	nx, watch = redisnx.New(rdb, nil), rediswatch.New(rdb, nil)
	t.Cleanup(func() { nx.Close(); watch.Close() })
	return nx, watch
}

// A redisnx holder and a rediswatch holder on the same key exclude each
// other both ways, share the fencing counter and wake each other's waiters.
func TestExcludeEachOther(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nx, watch := lockers(t)
	const k = "redismix/exclude"
	var last uint64
	for _, p := range []struct {
		name          string
		holder, other *lock.Locker
	}{{"redisnx holds", nx, watch}, {"rediswatch holds", watch, nx}} {
		lease, err := p.holder.TryLock(ctx, k)
		if err != nil {
			t.Fatalf("%s: TryLock: %v", p.name, err)
		}
		if lease.Token() <= last {
			t.Errorf("%s: token %d after %d: the drivers do not share the counter", p.name, lease.Token(), last)
		}
		last = lease.Token()
		if _, err := p.other.TryLock(ctx, k); !errors.Is(err, lock.ErrNotAcquired) {
			t.Fatalf("%s: the other driver's TryLock: err = %v, want ErrNotAcquired", p.name, err)
		}
		// A waiter on the other driver, with a backoff far longer than the
		// test: only the holder's release notification wakes it in time.
		got := make(chan *lock.Lease, 1)
		go func() {
			l, err := p.other.Lock(ctx, k, lock.WithRetry(lock.LinearBackoff(time.Hour)))
			if err != nil {
				t.Errorf("%s: waiter: %v", p.name, err)
			}
			got <- l
		}()
		time.Sleep(100 * time.Millisecond)
		released := time.Now()
		if err := lease.Unlock(ctx); err != nil {
			t.Fatalf("%s: Unlock: %v", p.name, err)
		}
		select {
		case l := <-got:
			if l == nil {
				t.FailNow()
			}
			if d := time.Since(released); d > time.Second {
				t.Errorf("%s: waiter granted %v after the release; want it woken by the release", p.name, d)
			}
			if l.Token() <= last {
				t.Errorf("%s: waiter's token %d after %d", p.name, l.Token(), last)
			}
			last = l.Token()
			l.Unlock(ctx)
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: the other driver's waiter not granted after the release", p.name)
		}
	}
}

// Under contention from both drivers at once, no two holders overlap.
func TestMixedContention(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nx, watch := lockers(t)
	const k = "redismix/contention"
	var (
		inside, overlaps, grants atomic.Int64
		wg                       sync.WaitGroup
	)
	for i := range 8 {
		l := nx
		if i%2 == 1 {
			l = watch
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 15 {
				lease, err := l.Lock(ctx, k)
				if err != nil {
					t.Errorf("Lock: %v", err)
					return
				}
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				grants.Add(1)
				time.Sleep(time.Millisecond)
				inside.Add(-1)
				if err := lease.Unlock(ctx); err != nil {
					t.Errorf("Unlock: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	if n := overlaps.Load(); n != 0 {
		t.Fatalf("%d overlapping grants between redisnx and rediswatch holders", n)
	}
	if n := grants.Load(); n != 120 {
		t.Fatalf("%d grants, want 120", n)
	}
}

// A redisnx Lock waiting in redisnx's queue is woken by a rediswatch
// release (which publishes on the key's channel and knows nothing of the
// queue) at once, not at its next queue renewal, a second later.
func TestQueuedWaiterWokenByWatchRelease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nx, watch := lockers(t)
	const k = "redismix/queued"
	for i := range 3 {
		held, err := watch.TryLock(ctx, k)
		if err != nil {
			t.Fatalf("TryLock: %v", err)
		}
		got := make(chan *lock.Lease, 1)
		go func() {
			l, err := nx.Lock(ctx, k) // no retry strategy: queued
			if err != nil {
				t.Errorf("waiter: %v", err)
			}
			got <- l
		}()
		time.Sleep(200 * time.Millisecond) // queued, past its first renewal's reach
		released := time.Now()
		if err := held.Unlock(ctx); err != nil {
			t.Fatalf("Unlock: %v", err)
		}
		l := <-got
		if l == nil {
			t.FailNow()
		}
		if d := time.Since(released); d > 700*time.Millisecond {
			t.Errorf("round %d: queued redisnx waiter granted %v after a rediswatch release; want it woken by the release, well before its renewal (1s)", i, d)
		}
		l.Unlock(ctx)
	}
}

// A rediswatch waiter queued (in P{K}:wq) on a key held by a redisnx
// grant is woken by its release: redisnx's uncontended release publishes
// on the key's channel while rediswatch's queue exists, though no listener
// mark or queue of its own does.
func TestQueuedWatchWaiterWokenByNxRelease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nx, watch := lockers(t)
	const k = "redismix/queued-watch"
	for i := range 3 {
		held, err := nx.TryLock(ctx, k)
		if err != nil {
			t.Fatalf("TryLock: %v", err)
		}
		got := make(chan *lock.Lease, 1)
		go func() {
			l, err := watch.Lock(ctx, k) // no retry strategy: queued
			if err != nil {
				t.Errorf("waiter: %v", err)
			}
			got <- l
		}()
		time.Sleep(200 * time.Millisecond) // queued, past its first renewal's reach
		released := time.Now()
		if err := held.Unlock(ctx); err != nil {
			t.Fatalf("Unlock: %v", err)
		}
		l := <-got
		if l == nil {
			t.FailNow()
		}
		if d := time.Since(released); d > 500*time.Millisecond {
			t.Errorf("round %d: queued rediswatch waiter granted %v after a redisnx release; want it woken by the release, well before its renewal (1s)", i, d)
		}
		l.Unlock(ctx)
	}
}

// Readers of both drivers share a key; a writer of either driver, and a
// plain SET NX lock (redsync's, redislock's), are kept out while any of
// them holds a share, and a writer waiting on either driver gets the key
// when the last of them leaves. A crashed reader (never renewed, never
// released) keeps its share until its own TTL and no longer.
func TestMixedReaders(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nxL, watchL := lockers(t)
	nx, watch := nxL, watchL
	rdb := rawClient(t)
	for _, p := range []struct {
		name           string
		first, second  *lock.Locker
		writer         *lock.Locker
		writerName     string
		crashedReaders bool
	}{
		{"redisnx then rediswatch reader, rediswatch writer", nx, watch, watchL, "rediswatch", false},
		{"rediswatch then redisnx reader, redisnx writer", watch, nx, nxL, "redisnx", true},
	} {
		k := "redismix/readers/" + p.writerName
		rk := redisnx.DefaultPrefix + "{" + k + "}"
		r1, err := p.first.TryRLock(ctx, k)
		if err != nil {
			t.Fatalf("%s: first reader: %v", p.name, err)
		}
		const crashTTL = 1200 * time.Millisecond
		opts := []lock.Option{}
		if p.crashedReaders {
			opts = append(opts, lock.WithTTL(crashTTL), lock.WithDisableAutoRenew(true))
		}
		r2, err := p.second.TryRLock(ctx, k, opts...)
		if err != nil {
			t.Fatalf("%s: second reader, of the other driver: %v", p.name, err)
		}
		if r2.Token() <= r1.Token() {
			t.Errorf("%s: reader tokens %d then %d", p.name, r1.Token(), r2.Token())
		}
		for _, w := range []*lock.Locker{nxL, watchL} {
			if _, err := w.TryLock(ctx, k); !errors.Is(err, lock.ErrNotAcquired) {
				t.Errorf("%s: a writer got in beside two readers: %v", p.name, err)
			}
		}
		if ok, err := rdb.SetNX(ctx, rk, "plain", time.Minute).Result(); err != nil || ok {
			t.Errorf("%s: a plain SET NX lock got in beside two readers: ok=%v err=%v", p.name, ok, err)
		}
		got := make(chan *lock.Lease, 1)
		go func() {
			l, err := p.writer.Lock(ctx, k)
			if err != nil {
				t.Errorf("%s: writer: %v", p.name, err)
			}
			got <- l
		}()
		time.Sleep(100 * time.Millisecond)
		if err := r1.Unlock(ctx); err != nil {
			t.Fatalf("%s: first reader's Unlock: %v", p.name, err)
		}
		start := time.Now()
		if !p.crashedReaders {
			select {
			case <-got:
				t.Fatalf("%s: the writer got in while a reader of the other driver holds a share", p.name)
			case <-time.After(300 * time.Millisecond):
			}
			if err := r2.Unlock(ctx); err != nil {
				t.Fatalf("%s: second reader's Unlock: %v", p.name, err)
			}
		} // else r2 crashed: never renewed, never released
		select {
		case w := <-got:
			if w == nil {
				t.FailNow()
			}
			waited := time.Since(start)
			if p.crashedReaders && waited < crashTTL-500*time.Millisecond {
				t.Errorf("%s: the writer got in %v after the live reader left, before the crashed reader's share (TTL %v) expired", p.name, waited, crashTTL)
			}
			if w.Token() <= r2.Token() {
				t.Errorf("%s: writer's token %d not above the readers' %d", p.name, w.Token(), r2.Token())
			}
			w.Unlock(ctx)
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the writer was not let in after the readers left", p.name)
		}
		if n := rdb.Exists(ctx, rk, rk+":r").Val(); n != 0 {
			t.Errorf("%s: %d of the lock key and the readers set left", p.name, n)
		}
	}
}

// Holds of one named owner through either driver share one grant (the
// same layout, P{K}:h): a re-entry through the other driver gets the same
// token, anonymous attempts of both drivers are excluded while any hold
// is left, and the last Unlock, through either driver, frees the key and
// leaves nothing behind.
func TestMixedHolds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nx, watch := lockers(t)
	rdb := rawClient(t)
	for _, p := range []struct {
		name          string
		first, second *lock.Locker
	}{{"redisnx then rediswatch", nx, watch}, {"rediswatch then redisnx", watch, nx}} {
		k := "redismix/holds/" + p.name
		rk := redisnx.DefaultPrefix + "{" + k + "}"
		h1, err := p.first.TryLock(ctx, k, lock.WithOwner("job"))
		if err != nil {
			t.Fatalf("%s: first hold: %v", p.name, err)
		}
		h2, err := p.second.TryLock(ctx, k, lock.WithOwner("job"))
		if err != nil {
			t.Fatalf("%s: re-entry through the other driver: %v", p.name, err)
		}
		if h2.Token() != h1.Token() {
			t.Errorf("%s: re-entry token %d, want %d", p.name, h2.Token(), h1.Token())
		}
		excluded(t, p.name+": beside two holds", k, nx, watch)
		if err := h1.Unlock(ctx); err != nil {
			t.Fatalf("%s: Unlock of the first hold: %v", p.name, err)
		}
		excluded(t, p.name+": beside the remaining hold", k, nx, watch)
		if err := h2.Unlock(ctx); err != nil {
			t.Fatalf("%s: Unlock of the last hold: %v", p.name, err)
		}
		if n, _ := rdb.Exists(ctx, rk, rk+redisx.HoldsSuffix).Result(); n != 0 {
			t.Errorf("%s: %d of the lock key and its holds left", p.name, n)
		}
		x, err := watch.TryLock(ctx, k)
		if err != nil {
			t.Fatalf("%s: the key is not free after the last hold: %v", p.name, err)
		}
		x.Unlock(ctx)
	}
}

// excluded fails the test if any of ls is granted k by an anonymous
// TryLock.
func excluded(t *testing.T, what, k string, ls ...*lock.Locker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, l := range ls {
		if x, err := l.TryLock(ctx, k); err == nil {
			x.Unlock(ctx)
			t.Fatalf("%s: an anonymous attempt was granted", what)
		}
	}
}

// Permits of both drivers on one key count against one limit (the same
// layout: S<N> in the lock key, members of P{K}:s): with a semaphore of
// two, one permit through each driver fills it for both; a limit other
// than the key's is refused through either; a crashed permit of one driver
// expires on its own while the other driver's stays; a permit waiter of
// one driver is let in when the other driver's permit is returned; and
// nothing is left behind.
func TestMixedPermits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nxL, watchL := lockers(t)
	nx, watch := nxL, watchL
	rdb := rawClient(t)
	for _, p := range []struct {
		name          string
		first, second *lock.Locker
	}{{"redisnx then rediswatch", nx, watch}, {"rediswatch then redisnx", watch, nx}} {
		k := "redismix/permits/" + p.name
		rk := redisnx.DefaultPrefix + "{" + k + "}"
		const crashTTL = 1200 * time.Millisecond
		p1, err := p.first.TryAcquire(ctx, k, 2, lock.WithTTL(crashTTL), lock.WithDisableAutoRenew(true)) // crashes: never renewed nor returned
		if err != nil {
			t.Fatalf("%s: first permit: %v", p.name, err)
		}
		crashed := time.Now()
		p2, err := p.second.TryAcquire(ctx, k, 2)
		if err != nil {
			t.Fatalf("%s: second permit, of the other driver: %v", p.name, err)
		}
		if p2.Token() <= p1.Token() {
			t.Errorf("%s: permit tokens %d then %d", p.name, p1.Token(), p2.Token())
		}
		for _, s := range []*lock.Locker{nx, watch} {
			if _, err := s.TryAcquire(ctx, k, 2); !errors.Is(err, lock.ErrNotAcquired) {
				t.Errorf("%s: a third permit of two: err = %v, want ErrNotAcquired", p.name, err)
			}
			if _, err := s.TryAcquire(ctx, k, 3); !errors.Is(err, lock.ErrInvalid) {
				t.Errorf("%s: another limit: err = %v, want ErrInvalid", p.name, err)
			}
		}
		excluded(t, p.name+": beside two permits", k, nxL, watchL)
		if ok, err := rdb.SetNX(ctx, rk, "plain", time.Minute).Result(); err != nil || ok {
			t.Errorf("%s: a plain SET NX lock got in beside two permits: ok=%v err=%v", p.name, ok, err)
		}
		// A waiter of the first driver gets the crashed permit once it
		// expired, while the live one of the other driver stays.
		w, err := p.first.Acquire(ctx, k, 2)
		if err != nil {
			t.Fatalf("%s: waiter for the crashed permit: %v", p.name, err)
		}
		if d := time.Since(crashed); d < crashTTL-300*time.Millisecond {
			t.Errorf("%s: the crashed permit came back %v after its grant; its TTL is %v", p.name, d, crashTTL)
		}
		if w.Token() <= p2.Token() {
			t.Errorf("%s: waiter's token %d not above %d", p.name, w.Token(), p2.Token())
		}
		select {
		case <-p2.Done():
			t.Fatalf("%s: the live permit was lost: %v", p.name, p2.Err())
		default:
		}
		// A waiter of the other driver is let in when the first driver's
		// permit is returned.
		got := make(chan *lock.Lease, 1)
		go func() {
			l, err := p.second.Acquire(ctx, k, 2)
			if err != nil {
				t.Errorf("%s: second waiter: %v", p.name, err)
			}
			got <- l
		}()
		time.Sleep(200 * time.Millisecond)
		if err := w.Unlock(ctx); err != nil {
			t.Fatalf("%s: Unlock: %v", p.name, err)
		}
		var w2 *lock.Lease
		select {
		case w2 = <-got:
			if w2 == nil {
				t.FailNow()
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: the other driver's waiter was not let in after a permit was returned", p.name)
		}
		for _, l := range []*lock.Lease{p2, w2} {
			if err := l.Unlock(ctx); err != nil {
				t.Errorf("%s: Unlock: %v", p.name, err)
			}
		}
		if n := rdb.Exists(ctx, rk, rk+redisx.PermitsSuffix).Val(); n != 0 {
			t.Errorf("%s: %d of the lock key and the permits set left", p.name, n)
		}
	}
}
