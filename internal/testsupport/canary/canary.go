// Package canary tells a starved machine from a late library in timing
// checks, for tests outside driver/drivertest (which keeps its own copy of
// these judgements, driver/drivertest/canary.go).
//
// A check that an event (Done closing, a call returning) came by its bound
// fails a library that is late; but on a machine starved of CPU every
// timer fires late, the library's as much as any. A canary tells the two
// apart: a timer set for the instant the event is due, that does nothing
// but note how late it fired. If the event overran its bound and the
// canary fired late too, the machine was starved: the check logs it and
// does not fail. If the canary fired on time, the library was late on its
// own: the check fails.
package canary

import (
	"fmt"
	"time"
)

// StarvedShare: the canary makes one goroutine wake-up where the library
// makes two or three (its timer's goroutine, then the waiter's), so it
// counts as starved when it fired at least a quarter as late as the event
// overran.
const StarvedShare = 4

// A Canary is a timer set for an instant, and how late it fired.
type Canary struct {
	at   time.Time
	rang chan struct{}
	late time.Duration // set before rang is closed
}

// New sets a canary for at. It starts no goroutine until it fires, so
// that a canary left behind counts as no leak.
func New(at time.Time) *Canary {
	c := &Canary{at: at, rang: make(chan struct{})}
	time.AfterFunc(time.Until(at), func() {
		c.late = time.Since(at)
		close(c.rang)
	})
	return c
}

// At is the instant the canary was set for.
func (c *Canary) At() time.Time { return c.at }

// Lateness waits for the canary and returns how late it fired.
func (c *Canary) Lateness() time.Duration {
	<-c.rang
	return c.late
}

// Starved reports whether a canary that fired canaryLate late explains an
// event that overran its bound by over.
func Starved(over, canaryLate time.Duration) bool {
	return canaryLate*StarvedShare >= over
}

// Reporter is the part of testing.TB that the judgements use.
type Reporter interface {
	Helper()
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
}

// CheckBy judges an event that came at at and was due by c's instant plus
// slack: nothing if it came in time; a log line if it overran and the
// machine was starved; else an error, with what (a format and its args)
// saying what came late.
func CheckBy(t Reporter, c *Canary, at time.Time, slack time.Duration, format string, args ...any) {
	t.Helper()
	over := at.Sub(c.at) - slack
	if over <= 0 {
		return
	}
	late := c.Lateness()
	what := fmt.Sprintf(format, args...)
	if Starved(over, late) {
		t.Logf("%s; not a failure: the machine was starved (a timer set for the same instant fired %v late)", what, late)
		return
	}
	t.Errorf("%s (a timer set for the same instant fired %v late: the machine was not starved)", what, late)
}

// AwaitBy waits for ch to close until c's instant plus slack, and then,
// while the canary says the machine is starved, a further StarvedShare
// times the canary's lateness. It returns when ch closed, and whether it
// did.
func AwaitBy(ch <-chan struct{}, c *Canary, slack time.Duration) (time.Time, bool) {
	t := time.NewTimer(time.Until(c.at.Add(slack)))
	defer t.Stop()
	select {
	case <-ch:
		return time.Now(), true
	case <-t.C:
	}
	t.Reset(StarvedShare * c.Lateness())
	select {
	case <-ch:
		return time.Now(), true
	case <-t.C:
		return time.Time{}, false
	}
}

// A Meter fires canaries one after another, Tick apart, until ended, and
// keeps the worst lateness: the longest the machine stalled at once. It
// judges checks that a stall fails the other way: a lease lost because its
// renewal came too late.
type Meter struct {
	stop  chan struct{}
	worst chan time.Duration
}

// Tick is how far apart a Meter's canaries are.
const Tick = 10 * time.Millisecond

// StartMeter starts a meter; End stops it.
func StartMeter() *Meter {
	m := &Meter{stop: make(chan struct{}), worst: make(chan time.Duration, 1)}
	go func() {
		var worst time.Duration
		t := time.NewTimer(Tick)
		defer t.Stop()
		next := time.Now().Add(Tick)
		for {
			select {
			case <-m.stop:
				m.worst <- worst
				return
			case <-t.C:
				worst = max(worst, time.Since(next))
				next = time.Now().Add(Tick)
				t.Reset(Tick)
			}
		}
	}()
	return m
}

// End stops the meter and returns the longest stall it saw.
func (m *Meter) End() time.Duration {
	close(m.stop)
	return <-m.worst
}

// Stalled judges a failure that a stall of margin or more explains (a
// renewal due margin before the deadline): with a meter whose worst stall
// was at least a quarter of margin, it logs what and reports true (not a
// failure); else false.
func Stalled(t Reporter, worst, margin time.Duration, what string) bool {
	t.Helper()
	if worst*StarvedShare < margin {
		return false
	}
	t.Logf("%s; not a failure: the machine stalled for %v at once (a stall of %v fails it)", what, worst, margin)
	return true
}
