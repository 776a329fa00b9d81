package lock

import (
	"context"
	"errors"
	"time"
)

// An Election elects one leader at a time among the candidates that
// campaign for it, over any backend: it is an exclusive lock of a key,
// the election's name, whose lease is the leader's term. Make it with
// Locker.Election; it is safe for concurrent use, and campaigns of one
// Election, or of Elections of the same name over any Lockers of the same
// backend, compete with each other.
//
// Its guarantees are the lock contract's (docs/design.md, section 3):
//
//   - One leader at a time: at most one term is live (C1).
//   - A term's Token is its fencing token, strictly increasing across
//     terms, even after the backend lost its counter (C5): a resource that
//     refuses writes with a lower term than it has seen refuses a deposed
//     leader's.
//   - A leader learns that it lost its term before any other candidate
//     can be elected: the term's Done closes no later than its Deadline,
//     which is never later than the moment another campaign could be
//     granted (C6).
//   - A campaign that ends without winning (its context ended, the Locker
//     closed) leaves nothing behind: no queue entry, no grant (C7).
//   - A candidate's announcement is stored with its grant, in the step
//     that grants it, and observers read it (Leader, Observe) for as long
//     as the term lasts, on backends whose driver stores notes
//     (Supports(Notes)).
type Election struct {
	lk   *Locker
	name string
}

// Election returns the election called name on lk's backend. The name is
// checked as a key is (non-empty, valid UTF-8, at most MaxKeyLen bytes):
// it is the key the leader holds, so an Election and a Lock of the same
// key exclude each other. A bad name (or a nil Locker) gives an error
// wrapping ErrInvalid.
func (lk *Locker) Election(name string) (*Election, error) {
	const op = "election"
	if lk == nil {
		return nil, newError(op, name, ErrInvalid, errNilLocker)
	}
	if err := checkKey(name); err != nil {
		return nil, newError(op, name, ErrInvalid, err)
	}
	return &Election{lk: lk, name: name}, nil
}

// Name returns the election's name: the key its leader holds.
func (e *Election) Name() string {
	if e == nil {
		return ""
	}
	return e.name
}

// Campaign blocks until this candidate is the leader, or ctx ends. The
// returned Lease is the term: Token is the term number, Done closes when
// the term is lost, and Unlock resigns. opts are as for Lock (a TTL, the
// renewal, a retry strategy), except WithOwner, refused with ErrInvalid:
// re-entry would make every candidate of one named owner leader at once.
//
// The announcement, who this candidate is and where to reach it (a host
// and port, say), is at most MaxNoteLen bytes of printable UTF-8, or
// empty; it is stored with the term's grant (WithNote) where the backend
// stores notes, and otherwise not stored (Leader and Observe are refused
// there). Errors are Lock's: they wrap ErrNotAcquired with ctx.Err() when
// ctx ended, ErrInvalid for a bad announcement or option, ErrClosed.
func (e *Election) Campaign(ctx context.Context, announcement string, opts ...Option) (*Lease, error) {
	opts, err := e.options("campaign", announcement, opts)
	if err != nil {
		return nil, err
	}
	return e.lk.Lock(ctx, e.name, opts...)
}

// TryCampaign is Campaign that does not wait: it fails at once with an
// error wrapping ErrNotAcquired and ErrHeld while another candidate leads.
func (e *Election) TryCampaign(ctx context.Context, announcement string, opts ...Option) (*Lease, error) {
	opts, err := e.options("trycampaign", announcement, opts)
	if err != nil {
		return nil, err
	}
	return e.lk.TryLock(ctx, e.name, opts...)
}

var errNamedCampaign = errors.New("WithOwner does not apply to a campaign: candidates of one named owner would all lead, in one term")

// options returns opts with the announcement's note, where the backend
// stores notes.
func (e *Election) options(op, announcement string, opts []Option) ([]Option, error) {
	if e == nil || e.lk == nil {
		return nil, newError(op, "", ErrInvalid, errors.New("nil *Election (use Locker.Election)"))
	}
	if err := checkNote(announcement); err != nil {
		return nil, newError(op, e.name, ErrInvalid, err)
	}
	co, err := e.lk.options(op, e.name, opts)
	if err != nil {
		return nil, err
	}
	if co.named {
		return nil, newError(op, e.name, ErrInvalid, errNamedCampaign)
	}
	if announcement == "" || e.lk.support(Notes) != nil {
		return opts, nil
	}
	return append(opts[:len(opts):len(opts)], WithNote(announcement)), nil
}

// Leader is who leads an election, as an observer reads it.
type Leader struct {
	// Term is the leader's term number (its Lease's Token); zero where
	// the backend cannot tell it (KeyState.Unknown.Tokens).
	Term uint64
	// Announcement is what the leader campaigned with.
	Announcement string
	// Owner is its grant's owner, as Inspect shows it (the Lease's
	// Handle carries the same token).
	Owner string
	// Since is when its term began; zero where the backend cannot tell.
	Since time.Time
}

// ErrNoLeader: Leader found nobody leading. It also matches ErrNotHeld.
var ErrNoLeader error = noLeader{}

type noLeader struct{}

func (noLeader) Error() string { return "lock: no leader" }
func (noLeader) Unwrap() error { return ErrNotHeld }

// Leader returns the current leader without campaigning: one Inspect of
// the election's key, so the answer describes one moment. It returns an
// error wrapping ErrNoLeader when nobody leads; ErrUnsupported, with the
// reason, on a backend whose driver stores no notes or cannot inspect
// (Supports(Notes)); otherwise Inspect's errors.
func (e *Election) Leader(ctx context.Context) (*Leader, error) {
	const op = "leader"
	if e == nil || e.lk == nil {
		return nil, newError(op, "", ErrInvalid, errors.New("nil *Election (use Locker.Election)"))
	}
	if err := e.lk.refuse(op, e.name, Notes); err != nil {
		return nil, err
	}
	st, err := e.lk.Inspect(ctx, e.name)
	if err != nil {
		return nil, err
	}
	if !st.Held() {
		return nil, newError(op, e.name, ErrNoLeader, nil)
	}
	h := st.Holders[0]
	return &Leader{Term: h.Token, Announcement: h.Note, Owner: h.Owner, Since: h.Since}, nil
}

// observeEvery is how often Observe reads the election's key.
const observeEvery = 250 * time.Millisecond

// Observe reports the election's leader, without campaigning: it sends
// the current one at once, then each change (a new term, or no leader: a
// zero Leader), until ctx ends or the Locker closes, and then closes the
// channel. It reads the key every 250 ms, and at once when the driver
// tells of a release (the Redis drivers): a change is seen within that
// delay plus a round trip, and a term shorter than that may go unseen.
// It does not wait for a slow reader: a reader sees the state as of its
// latest read. A failed read is retried at the next. It refuses a backend
// whose driver stores no notes or cannot inspect, as Leader does.
func (e *Election) Observe(ctx context.Context) (<-chan Leader, error) {
	const op = "observe"
	switch {
	case e == nil || e.lk == nil:
		return nil, newError(op, "", ErrInvalid, errors.New("nil *Election (use Locker.Election)"))
	case ctx == nil:
		return nil, newError(op, e.name, ErrInvalid, errNilContext)
	}
	if err := e.lk.refuse(op, e.name, Notes); err != nil {
		return nil, err
	}
	out := make(chan Leader)
	go e.observe(ctx, out)
	return out, nil
}

// observe is Observe's loop: read, offer what changed until the next
// read, repeat.
func (e *Election) observe(ctx context.Context, out chan<- Leader) {
	defer close(out)
	var wake <-chan struct{}
	if n := e.lk.notifier; n != nil {
		if c, unsub, err := n.Subscribe(ctx, e.name); err == nil {
			defer unsub()
			wake = c
		}
	}
	tick := time.NewTicker(observeEvery)
	defer tick.Stop()
	var last, pending *Leader
	for {
		now, err := e.Leader(ctx)
		switch {
		case errors.Is(err, ErrClosed) || ctx.Err() != nil:
			return
		case errors.Is(err, ErrNoLeader):
			now = &Leader{}
		}
		if now != nil { // else a failed read: keep what is pending
			pending = nil
			if last == nil || now.Term != last.Term || now.Owner != last.Owner {
				pending = now
			}
		}
		if !e.offer(ctx, out, &last, &pending, tick.C, wake) {
			return
		}
	}
}

// offer offers *pending to the reader until the next read is due (tick,
// wake), so that a slow reader gets the latest read and not an older
// one; a sent value becomes *last. It reports false when ctx ended or
// the Locker closed.
func (e *Election) offer(ctx context.Context, out chan<- Leader, last, pending **Leader, tick <-chan time.Time, wake <-chan struct{}) bool {
	for {
		var send chan<- Leader
		var v Leader
		if *pending != nil {
			send, v = out, **pending
		}
		select {
		case send <- v:
			*last, *pending = *pending, nil
		case <-tick:
			return true
		case <-wake:
			return true
		case <-ctx.Done():
			return false
		case <-e.lk.bgCtx.Done():
			return false
		}
	}
}

// LeaderCallbacks are what RunElection calls, in client-go's habit. Any
// may be nil.
type LeaderCallbacks struct {
	// OnStartedLeading runs, on a goroutine of its own, when this
	// candidate is elected, with the term and a context that ends when
	// the term does: lost (the term's Done), or ended by RunElection's
	// ctx. It should stop acting as leader when ctx ends; when it returns,
	// the term ends (RunElection resigns).
	OnStartedLeading func(ctx context.Context, term *Lease)
	// OnStoppedLeading runs when a term that began ends, after
	// OnStartedLeading returned and before the resignation.
	OnStoppedLeading func()
	// OnNewLeader runs for each change Observe reports, this candidate's
	// term included, from the start of RunElection to its end: a new
	// leader, or a zero Leader (Term 0) when there is none. It needs a
	// backend that stores notes (Supports(Notes)).
	OnNewLeader func(Leader)
}

// RunElection campaigns in lk's election name with announcement, leads
// one term through the callbacks, and returns when the term ends: nil
// when it ended because ctx did, or OnStartedLeading returned; an error
// wrapping ErrLost when the term was lost. It returns Campaign's error
// when ctx ends before this candidate is elected, and an error wrapping
// ErrUnsupported, before campaigning, when OnNewLeader is set on a
// backend that cannot observe. Call it in a loop to stand again after a
// lost term. opts are Campaign's.
func RunElection(ctx context.Context, lk *Locker, name, announcement string, cb LeaderCallbacks, opts ...Option) error {
	e, err := lk.Election(name)
	if err != nil {
		return err
	}
	if ctx == nil {
		return newError("campaign", name, ErrInvalid, errNilContext)
	}
	octx, stopObserving := context.WithCancel(ctx)
	defer stopObserving()
	if cb.OnNewLeader != nil {
		leaders, err := e.Observe(octx)
		if err != nil {
			return err
		}
		observed := make(chan struct{})
		defer func() { stopObserving(); <-observed }()
		go func() {
			defer close(observed)
			for l := range leaders {
				cb.OnNewLeader(l)
			}
		}()
	}
	term, err := e.Campaign(ctx, announcement, opts...)
	if err != nil {
		return err
	}
	return lead(ctx, term, cb)
}

// lead runs one term through cb, and resigns at its end.
func lead(ctx context.Context, term *Lease, cb LeaderCallbacks) error {
	tctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		if cb.OnStartedLeading != nil {
			cb.OnStartedLeading(tctx, term)
			return
		}
		<-tctx.Done()
	}()
	select {
	case <-term.Done():
		cancel(term.Err())
	case <-returned:
	case <-ctx.Done():
		cancel(nil)
	}
	<-returned
	if cb.OnStoppedLeading != nil {
		cb.OnStoppedLeading()
	}
	lost := term.Err()
	uctx, ucancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultReleaseTimeout)
	defer ucancel()
	term.Unlock(uctx)
	if errors.Is(lost, ErrLost) {
		return lost
	}
	return nil
}
