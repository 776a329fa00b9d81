package observe_test

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// flaky is an in-process TTL driver whose refreshes of one key, or whose
// releases, fail with a network error: what the failure metrics count.
type flaky struct {
	mu          sync.Mutex
	grants      map[string]grant
	counter     uint64
	refreshFail string // refreshes of this key fail
	releaseFail bool   // releases fail (and change nothing)
}

type grant struct {
	owner   string
	expires time.Time
}

var errReset = errors.New("flaky: connection reset")

func newFlaky() *flaky { return &flaky{grants: map[string]grant{}} }

func (f *flaky) set(fn func(*flaky)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *flaky) Validate(*driver.Lease) error { return nil }

func (f *flaky) Acquire(_ context.Context, l *driver.Lease) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	if g, ok := f.grants[l.Key]; ok && now.Before(g.expires) {
		return &driver.HeldError{RetryAfter: g.expires.Sub(now)}
	}
	f.grants[l.Key] = grant{owner: l.Owner, expires: now.Add(l.TTL)}
	f.counter++
	l.Token, l.Validity = f.counter, l.TTL
	return nil
}

func (f *flaky) Release(_ context.Context, l *driver.Lease) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.releaseFail {
		return errReset
	}
	g, ok := f.grants[l.Key]
	if !ok || g.owner != l.Owner || !time.Now().Before(g.expires) {
		return driver.ErrNotHeld
	}
	delete(f.grants, l.Key)
	return nil
}

func (f *flaky) Refresh(_ context.Context, l *driver.Lease, ttl time.Duration) (time.Duration, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if l.Key == f.refreshFail {
		return 0, errReset
	}
	g, ok := f.grants[l.Key]
	if !ok || g.owner != l.Owner || !time.Now().Before(g.expires) {
		return 0, driver.ErrNotHeld
	}
	g.expires = time.Now().Add(ttl)
	f.grants[l.Key] = g
	return ttl, nil
}

func (f *flaky) Close() error { return nil }
