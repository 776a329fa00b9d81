package nemesis

import (
	"fmt"
	"math"
	"time"

	"golang.org/x/sys/unix"
)

// Stamp is a moment on a run's clock: nanoseconds since the run's origin,
// read from the system's CLOCK_MONOTONIC, which every process of the
// machine shares. The parent and its child processes stamp their own
// observations on it, so that they compare without a message's delay.
type Stamp int64

// Never is the Stamp of something that did not happen.
const Never = Stamp(math.MaxInt64)

func (s Stamp) String() string {
	if s == Never {
		return "never"
	}
	return fmt.Sprintf("%.3fs", time.Duration(s).Seconds())
}

// monotonic reads CLOCK_MONOTONIC, the clock Go's time.Now reads its
// monotonic part from.
func monotonic() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(fmt.Sprintf("nemesis: clock_gettime: %v", err))
	}
	return ts.Nano()
}

// Clock converts this process's times to Stamps of a run whose origin is a
// CLOCK_MONOTONIC reading.
type Clock struct {
	t0   time.Time
	base Stamp // t0 on the run's clock
	orig int64
}

// NewClock returns a clock for the run that started at origin.
func NewClock(origin int64) *Clock {
	t0 := time.Now()
	return &Clock{t0: t0, base: Stamp(monotonic() - origin), orig: origin}
}

// origin is the run's origin, for child processes.
func (c *Clock) origin() int64 { return c.orig }

// Now is the current Stamp.
func (c *Clock) Now() Stamp { return c.At(time.Now()) }

// At converts a time of this process (with its monotonic reading, as
// time.Now and Lease.Deadline have) to a Stamp.
func (c *Clock) At(t time.Time) Stamp { return c.base + Stamp(t.Sub(c.t0)) }
