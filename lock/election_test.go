package lock_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver/memory"
	"github.com/dlock-go/dlock/lock"
)

// Campaign, TryCampaign, Leader and resignation on the memory driver:
// one leader at a time, terms increasing, the announcement visible.
func TestElectionCampaign(t *testing.T) {
	ctx := context.Background()
	s := memory.NewStore()
	a, b := memory.New(s, nil), memory.New(s, nil)
	defer a.Close()
	defer b.Close()
	ea, _ := a.Election("e")
	eb, err := b.Election("e")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eb.Leader(ctx); !errors.Is(err, lock.ErrNoLeader) || !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("Leader before any campaign: %v; want ErrNoLeader", err)
	}
	t1, err := ea.Campaign(ctx, "a:1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eb.TryCampaign(ctx, "b:1"); !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, lock.ErrHeld) {
		t.Errorf("TryCampaign while a leads: %v; want ErrNotAcquired and ErrHeld", err)
	}
	l, err := eb.Leader(ctx)
	if err != nil || l.Announcement != "a:1" || l.Term != t1.Token() || l.Since.IsZero() {
		t.Fatalf("Leader: %+v, %v; want a:1 in term %d", l, err, t1.Token())
	}
	won := make(chan *lock.Lease, 1)
	go func() {
		t2, err := eb.Campaign(ctx, "b:1")
		if err != nil {
			t.Error(err)
		}
		won <- t2
	}()
	select {
	case <-won:
		t.Fatal("b was elected while a leads")
	case <-time.After(100 * time.Millisecond):
	}
	if err := t1.Unlock(ctx); err != nil { // resign
		t.Fatal(err)
	}
	t2 := <-won
	if t2 == nil {
		return
	}
	if t2.Token() <= t1.Token() {
		t.Errorf("b's term %d is not above a's %d", t2.Token(), t1.Token())
	}
	if l, err := ea.Leader(ctx); err != nil || l.Announcement != "b:1" || l.Term != t2.Token() {
		t.Errorf("Leader after the resignation: %+v, %v; want b:1", l, err)
	}
	t2.Unlock(ctx)
}

// A campaign whose context ends leaves nothing behind; a lost term's
// Done closes; bad input is refused.
func TestElectionCancelAndInput(t *testing.T) {
	ctx := context.Background()
	s := memory.NewStore()
	a, b := memory.New(s, nil), memory.New(s, nil)
	defer a.Close()
	defer b.Close()
	ea, _ := a.Election("e")
	eb, _ := b.Election("e")
	t1, err := ea.Campaign(ctx, "a", lock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := eb.Campaign(cctx, "b"); !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a cancelled campaign: %v", err)
	}
	// Its queue entry is removed in the background, at once here.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		got := s.Entries("e")
		if len(got) == 1 && got[0] == ownerOf(t1) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the cancelled campaign the store keeps %v; want a's grant alone", got)
		}
	}
	s.DeleteKey("e")
	select {
	case <-t1.Done():
		if !errors.Is(t1.Err(), lock.ErrLost) {
			t.Errorf("Err of a lost term: %v", t1.Err())
		}
	case <-time.After(10 * time.Second):
		t.Error("a deleted term's Done did not close")
	}

	if _, err := a.Election(""); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("an empty name: %v", err)
	}
	if _, err := (*lock.Locker)(nil).Election("e"); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("a nil Locker: %v", err)
	}
	var nilE *lock.Election
	if _, err := nilE.Campaign(ctx, "x"); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("a nil Election: %v", err)
	}
	if _, err := nilE.Observe(ctx); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("a nil Election's Observe: %v", err)
	}
	if _, err := ea.TryCampaign(ctx, "bad\nannouncement"); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("a bad announcement: %v", err)
	}
	if _, err := ea.Campaign(ctx, strings.Repeat("x", lock.MaxNoteLen+1)); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("a long announcement: %v", err)
	}
}

// ownerOf is the owner token in a lease's handle.
func ownerOf(l *lock.Lease) string {
	parts := strings.SplitN(l.Handle(), ".", 5)
	return parts[2]
}

// On a driver without notes, campaigns work and observing is refused.
func TestElectionWithoutNotes(t *testing.T) {
	ctx := context.Background()
	lk := lock.New(newFake(), nil)
	defer lk.Close()
	e, _ := lk.Election("e")
	term, err := e.Campaign(ctx, "a:1")
	if err != nil {
		t.Fatalf("Campaign on a driver without notes: %v", err)
	}
	defer term.Unlock(ctx)
	if _, err := e.Leader(ctx); !errors.Is(err, lock.ErrUnsupported) {
		t.Errorf("Leader: %v; want ErrUnsupported", err)
	}
	if _, err := e.Observe(ctx); !errors.Is(err, lock.ErrUnsupported) {
		t.Errorf("Observe: %v; want ErrUnsupported", err)
	}
	err = lock.RunElection(ctx, lk, "e", "a", lock.LeaderCallbacks{OnNewLeader: func(lock.Leader) {}})
	if !errors.Is(err, lock.ErrUnsupported) {
		t.Errorf("RunElection with OnNewLeader: %v; want ErrUnsupported", err)
	}
}

// Observe sends the leader, each change and the gaps, until ctx ends.
func TestElectionObserve(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := memory.NewStore()
	a, b := memory.New(s, nil), memory.New(s, nil)
	defer a.Close()
	defer b.Close()
	ea, _ := a.Election("e")
	eb, _ := b.Election("e")
	octx, stop := context.WithCancel(ctx)
	seen, err := eb.Observe(octx)
	if err != nil {
		t.Fatal(err)
	}
	next := func(want string) lock.Leader {
		t.Helper()
		select {
		case l := <-seen:
			if l.Announcement != want {
				t.Fatalf("observed %+v; want announcement %q", l, want)
			}
			return l
		case <-ctx.Done():
			t.Fatalf("nothing observed; want %q", want)
		}
		return lock.Leader{}
	}
	if l := next(""); l.Term != 0 || l.Owner != "" {
		t.Errorf("no leader yet: observed %+v; want a zero Leader", l)
	}
	t1, _ := ea.Campaign(ctx, "a")
	if l := next("a"); l.Term != t1.Token() {
		t.Errorf("observed term %d; want %d", l.Term, t1.Token())
	}
	t1.Unlock(ctx)
	next("")
	stop()
	for range seen { // closes once octx ended
	}
}

// RunElection leads one term through the callbacks: OnStartedLeading's
// ctx ends when the term is lost, OnStoppedLeading follows, and the
// error says the term was lost.
func TestRunElection(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := memory.NewStore()
	lk := memory.New(s, nil)
	defer lk.Close()
	var started, stopped atomic.Int32
	var observed atomic.Value
	err := lock.RunElection(ctx, lk, "e", "me", lock.LeaderCallbacks{
		OnStartedLeading: func(tctx context.Context, term *lock.Lease) {
			started.Add(1)
			s.DeleteKey("e") // the term is lost behind its back
			<-tctx.Done()
			if stopped.Load() != 0 {
				t.Error("OnStoppedLeading ran before OnStartedLeading returned")
			}
		},
		OnStoppedLeading: func() { stopped.Add(1) },
		OnNewLeader:      func(l lock.Leader) { observed.Store(l.Announcement) },
	}, lock.WithTTL(time.Second))
	if observed.Load() == nil {
		t.Error("OnNewLeader never ran")
	}
	if !errors.Is(err, lock.ErrLost) || started.Load() != 1 || stopped.Load() != 1 {
		t.Errorf("RunElection: %v, started %d, stopped %d; want ErrLost, 1, 1", err, started.Load(), stopped.Load())
	}

	// OnStartedLeading returning ends the term: RunElection resigns.
	err = lock.RunElection(ctx, lk, "e", "me", lock.LeaderCallbacks{
		OnStartedLeading: func(context.Context, *lock.Lease) {},
	})
	if err != nil || len(s.Entries("e")) != 0 {
		t.Errorf("RunElection after a finished leader: %v, entries %v; want nil and none", err, s.Entries("e"))
	}
}
