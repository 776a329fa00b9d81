package redisnx

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/settest"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
)

// A set whose one-step grant (acquireset.lua) is sent to a paused server
// and whose reply is lost (the client's read times out, or the caller
// gives up) leaves none of the set held once the server is back, and the
// set can be taken again at once; a LockMany that falls back to key by
// key after the lost reply ends up holding the set alone.
func TestAudit42LostSetReply(t *testing.T) {
	for _, tc := range []struct {
		name         string
		cancel, wait bool
	}{{"try/timeout", false, false}, {"try/cancelled", true, false}, {"wait/cancelled", true, true}, {"wait/timeout", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			srv, c, raw := stallable(t)
			l := newTestLocker(t, c, &Options{Options: lockOpts(time.Minute)})
			k := testKey(t)
			keys := []string{k + "/a", k + "/b", k + "/c"}
			// Load the script, so that the grant is one EVALSHA.
			if m, err := l.TryLockMany(tctx(t, 10*time.Second), keys); err != nil || !m.Atomic() {
				t.Fatalf("TryLockMany: %v", err)
			} else {
				m.Unlock(tctx(t, 10*time.Second))
			}
			var got *lock.MultiLease
			err := duringStall(t, srv, tc.cancel, func(ctx context.Context) (err error) {
				if tc.wait {
					if !tc.cancel {
						ctx2, stop := context.WithTimeout(ctx, 2*time.Second)
						defer stop()
						go func() { time.Sleep(time.Second); srv.Resume() }()
						got, err = l.LockMany(ctx2, keys)
						return err
					}
					got, err = l.LockMany(ctx, keys)
					return err
				}
				got, err = l.TryLockMany(ctx, keys)
				return err
			})
			if got != nil {
				// A LockMany that outlived the stall: it holds the set;
				// nobody else may.
				other := newTestLocker(t, raw, nil)
				if m, err := other.TryLockMany(tctx(t, 10*time.Second), keys); err == nil {
					m.Unlock(tctx(t, 10*time.Second))
					t.Fatalf("a second holder of the set while the first holds it (atomic=%v)", got.Atomic())
				}
				got.Unlock(tctx(t, 10*time.Second))
			} else if !errors.Is(err, lock.ErrNotAcquired) {
				t.Errorf("err = %v, want ErrNotAcquired", err)
			}
			if !eventually(5*time.Second, func() bool {
				for _, key := range keys {
					n, err := raw.Exists(context.Background(), lockKey(DefaultPrefix, key)).Result()
					if err != nil || n != 0 {
						return false
					}
				}
				return true
			}) {
				var held []string
				for _, key := range keys {
					ttl, _ := raw.PTTL(context.Background(), lockKey(DefaultPrefix, key)).Result()
					held = append(held, fmt.Sprintf("%s PTTL %v", key, ttl))
				}
				t.Fatalf("members still held 5s after the lost set reply: %v", held)
			}
			other := newTestLocker(t, raw, nil)
			m, err := other.TryLockMany(tctx(t, 10*time.Second), keys)
			if err != nil {
				t.Fatalf("the set is not free after the lost reply: %v", err)
			}
			m.Unlock(tctx(t, 10*time.Second))
		})
	}
}

// A named owner's re-entry with another note keeps the first hold's note
// (the wire docs' rule), and the note stays while any hold lasts: an
// Election observer never sees the note of a hold that ended, nor none
// while the grant lives.
func TestAudit42ReentryNote(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l, err := lock.Open(ctx, "redisnx://"+testserver.StartRedis(t, nil).Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	e, _ := l.Election("audit42-reentry")
	note := func() string {
		ld, err := e.Leader(ctx)
		if err != nil {
			return "error: " + err.Error()
		}
		return ld.Announcement
	}
	h1, err := l.Lock(ctx, "audit42-reentry", lock.WithOwner("o"), lock.WithNote("first"))
	if err != nil {
		t.Fatal(err)
	}
	h2, err := l.Lock(ctx, "audit42-reentry", lock.WithOwner("o"), lock.WithNote("second"))
	if err != nil {
		t.Fatal(err)
	}
	if got := note(); got != "first" {
		t.Errorf("after the re-entry: note %q; want the first hold's", got)
	}
	st, _ := l.Inspect(ctx, "audit42-reentry")
	t.Logf("holders after re-entry: %+v", st.Holders)
	h1.Unlock(ctx)
	if got := note(); got != "first" {
		t.Errorf("after the first hold's release (the second still holds): note %q; want %q", got, "first")
	}
	h2.Unlock(ctx)
	if _, err := e.Leader(ctx); !errors.Is(err, lock.ErrNoLeader) {
		t.Errorf("after both releases: %v; want ErrNoLeader", err)
	}
}

// A candidate that waits in the queue longer than its note's first
// lifetime (two entry lifetimes and its TTL) and is then handed the term
// is still announced: Leader reads its note while it leads.
func TestAudit42LongWaitNote(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	url := "redisnx://" + testserver.StartRedis(t, nil).Addr()
	a, err := lock.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := lock.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ea, _ := a.Election("audit42-wait")
	eb, _ := b.Election("audit42-wait")
	t1, err := ea.Campaign(ctx, "a:1")
	if err != nil {
		t.Fatal(err)
	}
	won := make(chan *lock.Lease, 1)
	go func() {
		t2, err := eb.Campaign(ctx, "b:1", lock.WithTTL(time.Second))
		if err != nil {
			t.Error(err)
		}
		won <- t2
	}()
	time.Sleep(10 * time.Second) // > 2 entry lifetimes + b's TTL
	t1.Unlock(ctx)
	t2 := <-won
	if t2 == nil {
		return
	}
	defer t2.Unlock(ctx)
	time.Sleep(500 * time.Millisecond)
	ld, err := eb.Leader(ctx)
	if err != nil || ld.Term != t2.Token() || ld.Announcement != "b:1" {
		t.Errorf("Leader while b leads: %+v, %v; want b:1 in term %d", ld, err, t2.Token())
	}
}

// Overlapping sets with single-key lockers mixed in (settest.Stress).
func TestAudit42SetStress(t *testing.T) {
	url := "redisnx://" + testserver.StartRedis(t, nil).Addr()
	settest.Stress(t, func() *lock.Locker {
		l, err := lock.Open(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		return l
	})
}

// A LockMany taken key by key (a note keeps it off the one-step path)
// holds its first keys and waits for a held one; the server stalls and
// the call is cancelled: once the server is back and the other holder
// releases, none of the set is held by anyone.
func TestAudit42CancelMidwayStalled(t *testing.T) {
	srv, c, raw := stallable(t)
	l := newTestLocker(t, c, &Options{Options: lockOpts(time.Minute)})
	other := newTestLocker(t, raw, nil)
	k := testKey(t)
	keys := []string{k + "/a", k + "/b", k + "/c"}
	held, err := other.Lock(tctx(t, 10*time.Second), keys[2])
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	go func() {
		_, err := l.LockMany(ctx, keys, lock.WithNote("n"))
		res <- err
	}()
	if !eventually(5*time.Second, func() bool {
		st, err := other.Inspect(context.Background(), keys[2])
		return err == nil && len(st.Waiters) == 1
	}) {
		t.Fatal("LockMany never queued for the third key")
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	cancel()
	err = <-res
	time.Sleep(300 * time.Millisecond)
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(err, lock.ErrNotAcquired) {
		t.Errorf("LockMany: %v; want ErrNotAcquired", err)
	}
	held.Unlock(tctx(t, 10*time.Second))
	if !eventually(10*time.Second, func() bool {
		for _, key := range keys {
			n, err := raw.Exists(context.Background(), lockKey(DefaultPrefix, key)).Result()
			if err != nil || n != 0 {
				return false
			}
		}
		return true
	}) {
		for _, key := range keys {
			st, _ := other.Inspect(context.Background(), key)
			t.Logf("%s: holders %+v waiters %+v", key, st.Holders, st.Waiters)
		}
		t.Fatal("members still held 10s after the cancelled LockMany")
	}
}
