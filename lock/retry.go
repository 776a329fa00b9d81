package lock

import (
	"errors"
	"math/rand/v2"
	"time"
)

// A RetryStrategy decides how long Lock waits between attempts on a held
// key. Each Lock call asks it for a fresh Backoff, so two calls never share
// a retry budget or a backoff state.
//
// Lock may retry sooner than the Backoff says: at once when the driver tells
// of a release, or when the holder's grant expires (drivers that know it).
type RetryStrategy interface {
	NewBackoff() Backoff
}

// A Backoff is the retry state of one Lock call. Next returns the wait
// before the next attempt, or false to give up (Lock then returns an error
// wrapping ErrNotAcquired). It is used by one goroutine only.
type Backoff interface {
	Next() (time.Duration, bool)
}

type strategyFunc func() Backoff

func (f strategyFunc) NewBackoff() Backoff { return f() }

type backoffFunc func() (time.Duration, bool)

func (f backoffFunc) Next() (time.Duration, bool) { return f() }

// NoRetry makes Lock try once, like TryLock.
func NoRetry() RetryStrategy {
	return strategyFunc(func() Backoff {
		return backoffFunc(func() (time.Duration, bool) { return 0, false })
	})
}

// LinearBackoff retries every d, without limit. Values below 1 ms are
// raised to 1 ms so that a waiter cannot spin on the backend.
func LinearBackoff(d time.Duration) RetryStrategy {
	d = max(d, time.Millisecond)
	return strategyFunc(func() Backoff {
		return backoffFunc(func() (time.Duration, bool) { return d, true })
	})
}

// ExponentialBackoff retries without limit after waits drawn uniformly
// from [0, b) ("full jitter"), where b starts at base and doubles per
// attempt up to maxWait. Full jitter spreads contenders out, so that they do
// not retry in lockstep. Values below 1 ms are raised to 1 ms, and maxWait
// to at least base; any maxWait works, however large.
func ExponentialBackoff(base, maxWait time.Duration) RetryStrategy {
	base = max(base, time.Millisecond)
	maxWait = max(maxWait, base)
	return strategyFunc(func() Backoff {
		b := base
		return backoffFunc(func() (time.Duration, bool) {
			d := time.Duration(rand.Int64N(int64(b))) + 1
			if b <= maxWait/2 {
				b *= 2
			} else {
				b = maxWait
			}
			return d, true
		})
	})
}

// DefaultRetry is the retry strategy used when none is given, and the only
// one under which Lock queues:
//
//   - on drivers that queue waiters (ZooKeeper, redisnx, rediswatch,
//     memory), a waiting Lock joins the key's queue and is handed the key
//     in arrival order;
//   - on the others, it retries with exponential backoff and full jitter
//     from 2 ms up to 250 ms between attempts, without limit, and at once
//     when the driver tells of a release.
//
// Either way Lock waits until its context ends. Any other strategy, given
// in Options.Retry, to OpenWith or per call with WithRetry, is followed with
// single attempts on every driver, queueing ones included, so that NoRetry
// and LimitRetry bound a Lock everywhere; such a call is not queued. A Lock
// of a named owner (WithOwner) is never queued either: under DefaultRetry
// it backs off as on the drivers that do not queue.
// Giving DefaultRetry is the same as giving nothing.
var DefaultRetry RetryStrategy = queueing{ExponentialBackoff(2*time.Millisecond, 250*time.Millisecond)}

// queueing is DefaultRetry's type: a backoff for drivers that do not
// queue, and the mark that queueing ones may queue.
type queueing struct{ RetryStrategy }

// queues reports whether a Lock following s may queue.
func queues(s RetryStrategy) bool {
	_, ok := s.(queueing)
	return ok
}

// LimitRetry stops s after n retries (n+1 attempts in all). n <= 0 means
// no retry at all. LimitRetry(nil, n) is refused, with ErrInvalid, by the
// calls it is given to.
func LimitRetry(s RetryStrategy, n int) RetryStrategy {
	if s == nil {
		return invalidRetry{}
	}
	return strategyFunc(func() Backoff {
		inner, left := s.NewBackoff(), n
		return backoffFunc(func() (time.Duration, bool) {
			if left <= 0 {
				return 0, false
			}
			left--
			return inner.Next()
		})
	})
}

// invalidRetry is LimitRetry of a nil strategy: refused by the calls it is
// given to (checkRetry), and it never retries.
type invalidRetry struct{}

func (invalidRetry) NewBackoff() Backoff { return NoRetry().NewBackoff() }

// checkRetry refuses a strategy no call can follow.
func checkRetry(s RetryStrategy) error {
	switch s.(type) {
	case nil:
		return errors.New("nil RetryStrategy")
	case invalidRetry:
		return errors.New("LimitRetry of a nil RetryStrategy")
	}
	return nil
}
