package lock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// fake is an in-process driver with switches to inject faults: failing or
// slow calls, lost replies, refusals. It keeps grants in a map with
// expiries, like a TTL backend, and counts calls.
type fake struct {
	mu      sync.Mutex
	grants  map[string]fakeGrant
	counter uint64
	subs    map[string][]chan struct{}

	// Faults, read on every call; set them with setFaults while Lockers run.
	faults    faults
	loseReply atomic.Bool // apply the grant, then answer with the ctx error or errLostReply

	acquires, refreshes, releases, batches, subscribes, leaves atomic.Int64
}

type faults struct {
	refreshErr   func() error  // refresh answers this (and changes nothing)
	refreshFail  string        // refresh of this key alone fails with a network error
	releaseDelay time.Duration // a release's reply comes this late (the grant is deleted at once)
	releaseErr   func() error
	acquireErr   func() error  // an attempt answers this (and changes nothing)
	leaveErr     func() error  // a queuingFake's Leave answers this
	releaseHang  bool          // a release waits for its context to end, and fails
	releaseStuck time.Duration // a release fails after this long, whatever its context (gomemcache's own timeout)
	acquireDelay time.Duration
	acquireSlow  time.Duration // an attempt takes this long whatever its context, then grants
	closeSlow    time.Duration // the driver's Close takes this long (a session closed against a lost server)
	// A refresh reaches the backend applyDelay(ttl) late, is applied, and
	// its reply comes replyDelay later, or never (loseReply), whatever the
	// context: a slow or lossy network.
	refreshApplyDelay func(ttl time.Duration) time.Duration
	refreshReplyDelay time.Duration
	refreshLoseReply  bool
	// validityLoss makes validity shorter than the TTL by this much, as
	// memcached's whole-second clock does (Validate says so too).
	validityLoss time.Duration
}

func (f *fake) setFaults(fn func(*faults)) {
	f.mu.Lock()
	fn(&f.faults)
	f.mu.Unlock()
}

func (f *fake) getFaults() faults {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.faults
}

type fakeGrant struct {
	owner   string
	expires time.Time
}

var errLostReply = errors.New("fake: connection reset after the request was applied")

func newFake() *fake {
	return &fake{grants: map[string]fakeGrant{}, subs: map[string][]chan struct{}{}}
}

func (f *fake) Validate(l *driver.Lease) error {
	if loss := f.getFaults().validityLoss; loss > 0 {
		l.Validity = l.TTL - loss
	}
	return nil
}

func (f *fake) Acquire(ctx context.Context, l *driver.Lease) error {
	f.acquires.Add(1)
	time.Sleep(f.getFaults().acquireSlow)
	if fn := f.getFaults().acquireErr; fn != nil {
		if err := fn(); err != nil {
			return err
		}
	}
	if d := f.getFaults().acquireDelay; d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f.mu.Lock()
	g, ok := f.grants[l.Key]
	now := time.Now()
	if ok && now.Before(g.expires) {
		f.mu.Unlock()
		return &driver.HeldError{RetryAfter: g.expires.Sub(now)}
	}
	f.grants[l.Key] = fakeGrant{owner: l.Owner, expires: now.Add(l.TTL)}
	f.counter++
	l.Token, l.Validity = f.counter, l.TTL-f.faults.validityLoss
	f.mu.Unlock()
	if f.loseReply.Load() {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return errLostReply
	}
	return nil
}

func (f *fake) Release(ctx context.Context, l *driver.Lease) error {
	f.releases.Add(1)
	if f.getFaults().releaseHang {
		<-ctx.Done()
		return ctx.Err()
	}
	if d := f.getFaults().releaseStuck; d > 0 {
		time.Sleep(d)
		return errLostReply
	}
	if fn := f.getFaults().releaseErr; fn != nil {
		if err := fn(); err != nil {
			return err
		}
	}
	if err := f.release(l); err != nil {
		return err
	}
	time.Sleep(f.getFaults().releaseDelay)
	return nil
}

func (f *fake) release(l *driver.Lease) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	g, ok := f.grants[l.Key]
	if !ok || g.owner != l.Owner || !time.Now().Before(g.expires) {
		return driver.ErrNotHeld
	}
	delete(f.grants, l.Key)
	for _, c := range f.subs[l.Key] {
		select {
		case c <- struct{}{}:
		default:
		}
	}
	return nil
}

func (f *fake) Refresh(ctx context.Context, l *driver.Lease, ttl time.Duration) (time.Duration, error) {
	f.refreshes.Add(1)
	if k := f.getFaults().refreshFail; k != "" && k == l.Key {
		return 0, errors.New("fake: connection reset")
	}
	if fn := f.getFaults().refreshErr; fn != nil {
		if err := fn(); err != nil {
			return 0, err
		}
	}
	fs := f.getFaults()
	if fs.refreshApplyDelay != nil {
		time.Sleep(fs.refreshApplyDelay(ttl))
	}
	f.mu.Lock()
	g, ok := f.grants[l.Key]
	if !ok || g.owner != l.Owner || !time.Now().Before(g.expires) {
		f.mu.Unlock()
		return 0, driver.ErrNotHeld
	}
	g.expires = time.Now().Add(ttl)
	f.grants[l.Key] = g
	f.mu.Unlock()
	time.Sleep(fs.refreshReplyDelay)
	if fs.refreshLoseReply {
		return 0, errLostReply
	}
	return ttl - fs.validityLoss, nil
}

// expires returns when key's grant expires on the fake (zero if none).
func (f *fake) expires(key string) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.grants[key].expires
}

func (f *fake) Close() error {
	time.Sleep(f.getFaults().closeSlow)
	return nil
}

func (f *fake) As(target any) bool {
	if p, ok := target.(**fake); ok {
		*p = f
		return true
	}
	return false
}

// holder returns the owner of key's live grant, or "".
func (f *fake) holder(key string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	g, ok := f.grants[key]
	if !ok || !time.Now().Before(g.expires) {
		return ""
	}
	return g.owner
}

func (f *fake) del(key string) {
	f.mu.Lock()
	delete(f.grants, key)
	f.mu.Unlock()
}

// notifyingFake adds driver.Notifier.
type notifyingFake struct{ *fake }

func (f notifyingFake) Subscribe(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	f.subscribes.Add(1)
	c := make(chan struct{}, 1)
	f.mu.Lock()
	f.subs[key] = append(f.subs[key], c)
	f.mu.Unlock()
	return c, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		s := f.subs[key]
		for i := range s {
			if s[i] == c {
				f.subs[key] = append(s[:i], s[i+1:]...)
				break
			}
		}
	}, nil
}

// batchingFake adds driver.BatchRefresher.
type batchingFake struct{ *fake }

func (f batchingFake) RefreshBatch(ctx context.Context, ls []*driver.Lease, ttl time.Duration) (time.Duration, []error) {
	f.batches.Add(1)
	errs := make([]error, len(ls))
	for i, l := range ls {
		_, errs[i] = f.fake.Refresh(ctx, l, ttl)
		f.refreshes.Add(-1) // count batches, not their members
	}
	return ttl, errs
}

// queuingFake offers driver.Queuer: Join counts its calls in waits; the
// wait polls the fake (Check every millisecond), as a queue would hand
// the key over.
type queuingFake struct {
	*fake
	waits *atomic.Int64
}

func (f queuingFake) Join(ctx context.Context, l *driver.Lease, wake chan<- struct{}) error {
	f.waits.Add(1)
	return f.Check(ctx, l)
}

func (f queuingFake) Check(ctx context.Context, l *driver.Lease) error {
	err := f.Acquire(ctx, l)
	if errors.Is(err, driver.ErrHeld) {
		return &driver.HeldError{RetryAfter: time.Millisecond}
	}
	return err
}

func (f queuingFake) Leave(ctx context.Context, l *driver.Lease) error {
	f.leaves.Add(1)
	if fn := f.getFaults().leaveErr; fn != nil {
		return fn()
	}
	return nil
}

// slowBatchingFake's RefreshBatch takes delay and records the most calls
// in flight at once.
type slowBatchingFake struct {
	*fake
	delay            time.Duration
	inFlight, peakIn *atomic.Int64
}

func (f slowBatchingFake) RefreshBatch(ctx context.Context, ls []*driver.Lease, ttl time.Duration) (time.Duration, []error) {
	n := f.inFlight.Add(1)
	defer f.inFlight.Add(-1)
	for {
		p := f.peakIn.Load()
		if n <= p || f.peakIn.CompareAndSwap(p, n) {
			break
		}
	}
	time.Sleep(f.delay)
	return batchingFake{f.fake}.RefreshBatch(ctx, ls, ttl)
}
