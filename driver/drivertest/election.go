package drivertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// election returns the election of a name unique to the test, through l.
func election(t *testing.T, l *lock.Locker, name string) *lock.Election {
	t.Helper()
	e, err := l.Election(name)
	if err != nil {
		t.Fatalf("Election(%q): %v", name, err)
	}
	return e
}

// campaignAsync campaigns in e in the background; the channel gets the
// term, or nil after a failure (reported).
func campaignAsync(t *testing.T, e *lock.Election, c context.Context, announcement string) <-chan *lock.Lease {
	won := make(chan *lock.Lease, 1)
	go func() {
		term, err := e.Campaign(c, announcement)
		if err != nil {
			t.Errorf("Campaign(%q): %v", announcement, err)
		}
		won <- term
	}()
	return won
}

// Election/CampaignResign: one leader at a time; a second candidate is
// elected once the first resigns, in a higher term.
func testElectionCampaignResign(t *testing.T, h Harness) {
	a, b := h.NewLocker(t, nil), h.NewLocker(t, nil)
	name := key(t)
	ea, eb := election(t, a, name), election(t, b, name)
	t1, err := ea.Campaign(ctx(t, 10*time.Second), "a")
	if err != nil {
		t.Fatalf("A's Campaign: %v", err)
	}
	if _, err := eb.TryCampaign(ctx(t, 10*time.Second), "b"); !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("B's TryCampaign while A leads: %v; want ErrNotAcquired and ErrHeld", err)
	}
	won := campaignAsync(t, eb, ctx(t, 60*time.Second), "b")
	select {
	case t2 := <-won:
		t.Fatalf("B elected (%v) while A leads", t2 != nil)
	case <-time.After(200 * time.Millisecond):
	}
	if err := t1.Unlock(ctx(t, 10*time.Second)); err != nil {
		t.Fatalf("A's resignation: %v", err)
	}
	t2 := <-won
	if t2 == nil {
		return
	}
	if t2.Token() <= t1.Token() {
		t.Errorf("B's term %d is not above A's %d", t2.Token(), t1.Token())
	}
	if err := t2.Unlock(ctx(t, 10*time.Second)); err != nil {
		t.Errorf("B's resignation: %v", err)
	}
	assertNoResidue(t, h, name)
}

// Election/TermsIncrease: terms strictly increase across leaders, as
// three candidates take turns.
func testElectionTermsIncrease(t *testing.T, h Harness) {
	name := key(t)
	es := []*lock.Election{
		election(t, h.NewLocker(t, nil), name), election(t, h.NewLocker(t, nil), name), election(t, h.NewLocker(t, nil), name),
	}
	var last uint64
	for i := range 6 {
		term, err := es[i%3].Campaign(ctx(t, 30*time.Second), "candidate")
		if err != nil {
			t.Fatalf("term %d: %v", i, err)
		}
		if term.Token() <= last {
			t.Errorf("term %d's number %d is not above the previous %d", i, term.Token(), last)
		}
		last = term.Token()
		if err := term.Unlock(ctx(t, 10*time.Second)); err != nil {
			t.Fatalf("resignation %d: %v", i, err)
		}
	}
}

// Election/DoneBeforeNextLeader: a leader whose process stops (Crash)
// sees its term's Done close before another candidate is elected.
func testElectionDoneBeforeNextLeader(t *testing.T, h Harness) {
	ttl := h.Caps().ttl()
	a, b := h.NewLocker(t, &lock.Options{TTL: ttl}), h.NewLocker(t, nil)
	name := key(t)
	t1, err := election(t, a, name).Campaign(ctx(t, 10*time.Second), "a")
	if err != nil {
		t.Fatalf("A's Campaign: %v", err)
	}
	lostAt := make(chan time.Time, 1)
	go func() {
		<-t1.Done()
		lostAt <- time.Now()
	}()
	h.Crash(t, a)
	t2, err := election(t, b, name).Campaign(ctx(t, h.Caps().expiryBound(ttl)+5*time.Second), "b")
	electedAt := time.Now()
	if err != nil {
		t.Fatalf("B's Campaign: %v", err)
	}
	defer t2.Unlock(ctx(t, 10*time.Second))
	select {
	case at := <-lostAt:
		if !at.Before(electedAt) {
			t.Errorf("A's Done closed %v after B was elected", at.Sub(electedAt))
		}
	default:
		t.Errorf("A's Done still open when B was elected")
	}
	if !errors.Is(t1.Err(), lock.ErrLost) {
		t.Errorf("A's Err() = %v, want ErrLost", t1.Err())
	}
	if t2.Token() <= t1.Token() {
		t.Errorf("B's term %d is not above A's %d", t2.Token(), t1.Token())
	}
}

// Election/CancelLeavesNothing: a campaign whose context ends while
// another leads returns ErrNotAcquired with the context's error and leaves
// nothing: after the leader resigns, a third candidate is elected at once
// and the backend keeps nothing of the name once it resigns too.
func testElectionCancelLeavesNothing(t *testing.T, h Harness) {
	a, b, c := h.NewLocker(t, nil), h.NewLocker(t, nil), h.NewLocker(t, nil)
	name := key(t)
	t1, err := election(t, a, name).Campaign(ctx(t, 10*time.Second), "a")
	if err != nil {
		t.Fatalf("A's Campaign: %v", err)
	}
	short, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := election(t, b, name).Campaign(short, "b"); !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("B's cancelled Campaign: %v; want ErrNotAcquired and DeadlineExceeded", err)
	}
	if err := t1.Unlock(ctx(t, 10*time.Second)); err != nil {
		t.Fatalf("A's resignation: %v", err)
	}
	t3, err := election(t, c, name).Campaign(ctx(t, 10*time.Second), "c")
	if err != nil {
		t.Fatalf("C's Campaign after A resigned: %v", err)
	}
	if err := t3.Unlock(ctx(t, 10*time.Second)); err != nil {
		t.Fatalf("C's resignation: %v", err)
	}
	assertNoResidue(t, h, name)
}

// Election/Observe: Leader and Observe show the leader's announcement
// and term, and the change to the next leader, without campaigning.
func testElectionObserve(t *testing.T, h Harness) {
	notesOrSkip(t, h)
	ic := inspectCaps(t, h)
	a, b, viewer := h.NewLocker(t, nil), h.NewLocker(t, nil), h.NewLocker(t, nil)
	name := key(t)
	ev := election(t, viewer, name)
	if _, err := ev.Leader(ctx(t, 10*time.Second)); !errors.Is(err, lock.ErrNoLeader) {
		t.Fatalf("Leader before any campaign: %v; want ErrNoLeader", err)
	}
	seen, err := ev.Observe(ctx(t, 60*time.Second))
	if err != nil {
		t.Fatalf("Observe: %v", err)
	}
	next := func(want string) lock.Leader {
		t.Helper()
		for {
			select {
			case l := <-seen:
				if l.Announcement == want {
					return l
				}
				t.Logf("observed %+v on the way to %q", l, want)
			case <-time.After(10 * time.Second):
				t.Fatalf("%q not observed within 10s", want)
			}
		}
	}
	next("")
	t1, err := election(t, a, name).Campaign(ctx(t, 10*time.Second), "a:1")
	if err != nil {
		t.Fatalf("A's Campaign: %v", err)
	}
	l := next("a:1")
	got, err := ev.Leader(ctx(t, 10*time.Second))
	if err != nil || got.Announcement != "a:1" || got.Owner != ownerOf(t, t1) {
		t.Fatalf("Leader: %+v, %v; want A's", got, err)
	}
	if ic.Tokens && (l.Term != t1.Token() || got.Term != t1.Token()) {
		t.Errorf("observed term %d, Leader's %d; want A's %d", l.Term, got.Term, t1.Token())
	}
	won := campaignAsync(t, election(t, b, name), ctx(t, 60*time.Second), "b:2")
	time.Sleep(100 * time.Millisecond)
	if err := t1.Unlock(ctx(t, 10*time.Second)); err != nil {
		t.Fatalf("A's resignation: %v", err)
	}
	t2 := <-won
	if t2 == nil {
		return
	}
	defer t2.Unlock(ctx(t, 10*time.Second))
	if l := next("b:2"); ic.Tokens && l.Term != t2.Token() {
		t.Errorf("observed term %d; want B's %d", l.Term, t2.Token())
	}
}
