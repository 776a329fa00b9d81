package rediswatch

import (
	"context"
	"errors"
	"github.com/dlock-go/dlock/internal/testsupport/redistest"
	"slices"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// recorded returns a new client of rdb's server whose round trips rec
// records.
func recorded(t *testing.T, rdb *redis.Client, rec *recorder) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr})
	addHook(c, rec)
	t.Cleanup(func() { c.Close() })
	return c
}

// waiterAt returns the owner and inbox of the i-th element of lk's queue,
// once it has at least i+1.
func waiterAt(t *testing.T, rdb redis.UniversalClient, lk string, i int64) (owner, inbox string) {
	t.Helper()
	if !eventually(5*time.Second, func() bool { return queueLen(t, rdb, lk) > i }) {
		t.Fatalf("%d waiters queued, want %d", queueLen(t, rdb, lk), i+1)
	}
	return splitElem(rdb.LIndex(testCtx(t), waitQueue(lk), i).Val())
}

type granted struct {
	lease *lock.Lease
	err   error
}

// waitFor waits up to d for what lockLater's got reports.
func waitFor(got <-chan granted) func(d time.Duration) (*lock.Lease, bool, error) {
	return func(d time.Duration) (*lock.Lease, bool, error) {
		select {
		case r := <-got:
			return r.lease, true, r.err
		case <-time.After(d):
			return nil, false, nil
		}
	}
}

func lockLater(ctx context.Context, l *lock.Locker, k string) <-chan granted {
	got := make(chan granted, 1)
	go func() {
		lease, err := l.Lock(ctx, k)
		got <- granted{lease, err}
	}()
	return got
}

// A release hands the key to the first waiter in its own transaction, and
// its message only wakes the waiter: the waiter's claim (one round trip,
// see claim) reads the key its own and takes the grant, between the
// release and its Lock returning. The release takes three round trips when it must
// look up the first waiter's entry, and two when it was itself granted
// through the queue and the waiter behind it is still first (its own
// attempt read it). The check has teeth both ways: a waiter that took the
// message as its grant would send nothing.
func TestHandOverRoundTrips(t *testing.T) {
	rdb := standalone(t)
	holderRec, w1Rec, w2Rec := &recorder{}, &recorder{}, &recorder{}
	holder, _ := newTestLocker(t, recorded(t, rdb, holderRec), nil)
	w1, _ := newTestLocker(t, recorded(t, rdb, w1Rec), nil)
	w2, _ := newTestLocker(t, recorded(t, rdb, w2Rec), nil)
	k := testKey(t)
	lk := redisx.LockKey(DefaultPrefix, k)
	ctx := testCtx(t)
	for try := 1; ; try++ {
		held, err := holder.TryLock(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		got1 := lockLater(ctx, w1, k)
		waiterAt(t, rdb, lk, 0)
		got2 := lockLater(ctx, w2, k)
		waiterAt(t, rdb, lk, 1)
		time.Sleep(50 * time.Millisecond) // the replies of the joins are in
		holderRec.take()
		w1Rec.take()
		if err := held.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		r1 := <-got1
		if r1.err != nil {
			t.Fatal(r1.err)
		}
		release, w1Trips := holderRec.take(), w1Rec.take()
		attempt := []string{"multi get pttl get lrange exec"}
		// A heartbeat of lock may fall between the release and the grant:
		// retry a few times before calling it a failure.
		if !slices.Equal(w1Trips, attempt) && try < 3 {
			t.Logf("try %d: the waiter sent %q after the release", try, w1Trips)
			r1.lease.Unlock(ctx)
			if r := <-got2; r.err == nil {
				r.lease.Unlock(ctx)
			}
			continue
		}
		if !slices.Equal(w1Trips, attempt) {
			t.Errorf("the first waiter sent %q between the release and its grant; want its attempt, %q", w1Trips, attempt)
		}
		want := []string{"watch get lrange", "watch get time get", "multi del set set lrem del set publish exec"}
		if !slices.Equal(release, want) {
			t.Errorf("release to a waiter found in the queue: round trips\n  %q\nwant\n  %q", release, want)
		}
		if r1.lease.Token() <= held.Token() {
			t.Errorf("hand-over token %d, not above the holder's %d", r1.lease.Token(), held.Token())
		}
		w2Rec.take()
		if err := r1.lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		r2 := <-got2
		if r2.err != nil {
			t.Fatal(r2.err)
		}
		release, w2Trips := w1Rec.take(), w2Rec.take()
		if !slices.Equal(w2Trips, attempt) {
			t.Errorf("the second waiter sent %q between the release and its grant; want its attempt, %q", w2Trips, attempt)
		}
		want = []string{"watch get lrange get time get", "multi del del set set lrem del set publish exec"}
		if !slices.Equal(release, want) {
			t.Errorf("release to the waiter its attempt read behind it: round trips\n  %q\nwant\n  %q", release, want)
		}
		if r2.lease.Token() <= r1.lease.Token() {
			t.Errorf("second hand-over token %d, not above %d", r2.lease.Token(), r1.lease.Token())
		}
		if err := r2.lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if left := rdb.Keys(ctx, redistest.GlobEscape(lk)+"*").Val(); len(left) > 1 { // the counter stays
			t.Errorf("keys left after the last release: %q", left)
		}
		if s := stats(t, holder); s.HandOvers != uint64(try) {
			t.Errorf("holder's Stats.HandOvers = %d after %d hand-overs", s.HandOvers, try)
		}
		if c1, c2 := stats(t, w1).Claims, stats(t, w2).Claims; c1 == 0 || c2 != 1 {
			t.Errorf("Stats.Claims = %d and %d after the waiters' claims", c1, c2)
		}
		return
	}
}

// handOverSilently does what a release does when it hands lk to the waiter
// owner, but sends no message, and returns the token.
func handOverSilently(t *testing.T, rdb redis.UniversalClient, lk, owner, inbox string) int64 {
	t.Helper()
	ctx := testCtx(t)
	token := time.Now().UnixMicro() + 1e12 // above every token so far
	_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, lk, owner, time.Minute)
		p.Set(ctx, counterKey(lk), token, fenceLife)
		p.LRem(ctx, waitQueue(lk), 1, queueElem(owner, inbox))
		p.Del(ctx, waitEntry(lk, owner))
		p.Set(ctx, grantRecord(lk, owner), token, redisx.EntryLife)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// A waiter whose hand-over message was lost finds the key its own at its
// next attempt (here woken by a release message naming no one), extends it
// to its TTL and takes the token from the grant record. The check has
// teeth: a waiter that took a key held by its own owner for another's
// would wait for the minute the key lives.
func TestLostHandOverMessage(t *testing.T) {
	rdb := standalone(t)
	l, _ := newTestLocker(t, rdb, nil)
	k := testKey(t)
	lk := redisx.LockKey(DefaultPrefix, k)
	ctx := testCtx(t)
	if err := rdb.Set(ctx, lk, "foreign", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	got := lockLater(ctx, l, k)
	owner, inbox := waiterAt(t, rdb, lk, 0)
	token := handOverSilently(t, rdb, lk, owner, inbox)
	rdb.Publish(ctx, channel(lk), "")
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.lease.Token() != uint64(token) {
			t.Errorf("token %d, want the grant record's %d", r.lease.Token(), token)
		}
		if pttl := rdb.PTTL(ctx, lk).Val(); pttl > lock.DefaultTTL || pttl < lock.DefaultTTL-5*time.Second {
			t.Errorf("PTTL %v after the grant; want the lease's TTL, %v", pttl, lock.DefaultTTL)
		}
		if n := rdb.Exists(ctx, grantRecord(lk, owner), waitEntry(lk, owner)).Val(); n != 0 {
			t.Errorf("%d of the grant record and the entry left after the grant", n)
		}
		if err := r.lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter did not take the key handed to it within 5s")
	}
}

// A waiter that gives up after a release handed it the key, before it took
// the message as its grant, releases the key in its clean-up, handing it
// to the next waiter. The check has teeth: a clean-up that only leaves the
// queue leaves the key held for its minute.
func TestLeaveAfterHandOver(t *testing.T) {
	rdb := standalone(t)
	l, _ := newTestLocker(t, rdb, nil)
	next, _ := newTestLocker(t, rdb, nil)
	k := testKey(t)
	lk := redisx.LockKey(DefaultPrefix, k)
	ctx := testCtx(t)
	if err := rdb.Set(ctx, lk, "foreign", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := lockLater(wctx, l, k)
	owner, inbox := waiterAt(t, rdb, lk, 0)
	gotNext := lockLater(ctx, next, k)
	waiterAt(t, rdb, lk, 1)
	handOverSilently(t, rdb, lk, owner, inbox)
	cancel()
	if r := <-got; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled Lock: lease %v, err %v", r.lease, r.err)
	}
	select {
	case r := <-gotNext:
		if r.err != nil {
			t.Fatal(r.err)
		}
		r.lease.Unlock(ctx)
	case <-time.After(5 * time.Second):
		t.Fatalf("the next waiter was not granted within 5s of the first one's clean-up; the key holds %q", rdb.Get(ctx, lk).Val())
	}
	if n := rdb.Exists(ctx, grantRecord(lk, owner)).Val(); n != 0 {
		t.Errorf("the cancelled waiter's grant record left behind")
	}
}

// A Lock on a busy key (one whose channel the Locker has subscribed:
// others of its waiters are queued on it) joins the queue in its attempt's
// two round trips: the reads, WATCHing the lock key and the attempt's
// tombstone, then a transaction that joins (no join may land after the
// attempt's Leave: the tombstone voids it). When the key turns out free,
// the same two round trips take it.
func TestBusyKeyJoinsInTheAttempt(t *testing.T) {
	rdb := standalone(t)
	rec := &recorder{}
	holder, _ := newTestLocker(t, rdb, nil)
	l, _ := newTestLocker(t, recorded(t, rdb, rec), nil)
	k := testKey(t)
	lk := redisx.LockKey(DefaultPrefix, k)
	ctx := testCtx(t)
	held, err := holder.TryLock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	got1 := lockLater(ctx, l, k)
	waiterAt(t, rdb, lk, 0)
	time.Sleep(50 * time.Millisecond) // subscribed and confirmed
	rec.take()
	got2 := lockLater(ctx, l, k)
	waiterAt(t, rdb, lk, 1)
	time.Sleep(20 * time.Millisecond)
	want := []string{"watch get get time lrange", "pttl multi lrem lrem set del rpush pexpire exec"}
	if trips := rec.take(); !slices.Equal(trips, want) {
		t.Errorf("join of a busy key: round trips\n  %q\nwant\n  %q", trips, want)
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for _, got := range []<-chan granted{got1, got2} {
		r := <-got
		if r.err != nil {
			t.Fatal(r.err)
		}
		if err := r.lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The channel is still subscribed (it lingers): the next Lock's
	// attempt finds the key free and takes it, joining nothing.
	rec.take()
	lease, err := l.Lock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	want = []string{"watch get get time lrange", "multi set set exec"}
	if trips := rec.take(); !slices.Equal(trips, want) {
		t.Errorf("join of a busy key found free: round trips\n  %q\nwant\n  %q", trips, want)
	}
	lease.Unlock(ctx)
	if n := queueLen(t, rdb, lk); n != 0 {
		t.Errorf("%d left in the queue", n)
	}
}
