package drivertest

import (
	"fmt"
	"time"
)

// Timing checks on a loaded machine. A check that an event (Done closing,
// a call returning, a key becoming free) came by its bound fails a library
// that is late; but on a machine starved of CPU every timer fires late,
// the library's as much as any, and fencing tokens, not timing, are what
// keeps a client safe then. A canary tells the two apart: a timer set for
// the instant the event is due, that does nothing but note how late it
// fired. If the event overran its bound and the canary fired late too, the
// machine was starved: the check logs it and does not fail. If the canary
// fired on time, the library was late on its own: the check fails.
//
// The canary makes one goroutine wake-up where the library makes two or
// three (its timer's goroutine, then the waiter's), so it counts as
// starved when it fired at least a quarter as late as the event overran.
const starvedShare = 4

// A canary is a timer set for an instant, and how late it fired.
type canary struct {
	at   time.Time
	rang chan struct{}
	late time.Duration // set before rang is closed
}

// newCanary sets a canary for at. It starts no goroutine until it fires,
// so that a canary left behind counts as no leak (C8/CloseLeaksNoGoroutine).
func newCanary(at time.Time) *canary {
	c := &canary{at: at, rang: make(chan struct{})}
	time.AfterFunc(time.Until(at), func() {
		c.late = time.Since(at)
		close(c.rang)
	})
	return c
}

// lateness waits for the canary and returns how late it fired.
func (c *canary) lateness() time.Duration {
	<-c.rang
	return c.late
}

// starved reports whether a canary that fired canaryLate late explains an
// event that overran its bound by over.
func starved(over, canaryLate time.Duration) bool {
	return canaryLate*starvedShare >= over
}

// reporter is the part of testing.TB that the judgements use.
type reporter interface {
	Helper()
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
}

// checkBy judges an event that came at at and was due by c's instant plus
// slack: nothing if it came in time; a log line if it overran and the
// machine was starved; else an error, with what (a format and its args)
// saying what came late.
func checkBy(t reporter, c *canary, at time.Time, slack time.Duration, format string, args ...any) {
	t.Helper()
	over := at.Sub(c.at) - slack
	if over <= 0 {
		return
	}
	late := c.lateness()
	what := fmt.Sprintf(format, args...)
	if starved(over, late) {
		t.Logf("%s; not a failure: the machine was starved (a timer set for the same instant fired %v late)", what, late)
		return
	}
	t.Errorf("%s (a timer set for the same instant fired %v late: the machine was not starved)", what, late)
}

// awaitBy waits for ch to close until c's instant plus slack, and then,
// while the canary says the machine is starved, a further starvedShare
// times the canary's lateness. It returns when ch closed, and whether it
// did.
func awaitBy(ch <-chan struct{}, c *canary, slack time.Duration) (time.Time, bool) {
	t := time.NewTimer(time.Until(c.at.Add(slack)))
	defer t.Stop()
	select {
	case <-ch:
		return time.Now(), true
	case <-t.C:
	}
	t.Reset(starvedShare * c.lateness())
	select {
	case <-ch:
		return time.Now(), true
	case <-t.C:
		return time.Time{}, false
	}
}

// closedBy reports whether ch closes within d: on a starved machine it
// waits longer (see awaitBy), and logs that it did.
func closedBy(t reporter, ch <-chan struct{}, d time.Duration) bool {
	t.Helper()
	c := newCanary(time.Now().Add(d))
	at, ok := awaitBy(ch, c, 0)
	if ok && at.After(c.at) {
		t.Logf("closed %v after its bound %v; not a failure: the machine was starved (a timer set for the bound fired %v late)", at.Sub(c.at), d, c.lateness())
	}
	return ok
}

// past reports whether c's instant has passed, and the further
// starvedShare times its lateness that a starved machine is given (see
// awaitBy): a polling loop's bound.
func past(c *canary) bool {
	now := time.Now()
	if now.Before(c.at) {
		return false
	}
	select {
	case <-c.rang:
		return now.After(c.at.Add(starvedShare * c.late))
	default: // due, but not fired yet: the machine is starved
		return false
	}
}

// A meter fires canaries one after another, meterTick apart, until ended,
// and keeps the worst lateness: the longest the machine stalled at once.
// It judges checks that a stall fails the other way: a lease lost because
// its renewal came too late, a deadline found short after a slow grant.
type meter struct {
	stop  chan struct{}
	worst chan time.Duration
}

const meterTick = 10 * time.Millisecond

func startMeter() *meter {
	m := &meter{stop: make(chan struct{}), worst: make(chan time.Duration, 1)}
	go func() {
		var worst time.Duration
		t := time.NewTimer(meterTick)
		defer t.Stop()
		next := time.Now().Add(meterTick)
		for {
			select {
			case <-m.stop:
				m.worst <- worst
				return
			case <-t.C:
				worst = max(worst, time.Since(next))
				next = time.Now().Add(meterTick)
				t.Reset(meterTick)
			}
		}
	}()
	return m
}

// end stops the meter and returns the longest stall it saw.
func (m *meter) end() time.Duration {
	close(m.stop)
	return <-m.worst
}

// stalled judges a failure that a stall of margin or more explains (a
// renewal due margin before the deadline): with a meter whose worst stall
// was at least a quarter of margin, it logs what and reports true (not a
// failure); else false.
func stalled(t reporter, worst, margin time.Duration, what string) bool {
	t.Helper()
	if worst*starvedShare < margin {
		return false
	}
	t.Logf("%s; not a failure: the machine stalled for %v at once (a stall of %v fails it)", what, worst, margin)
	return true
}
