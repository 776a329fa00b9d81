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
func NewClock(origin int64) *Clock { return newClock(origin, time.Now, monotonic) }

// pairSlack is how far apart the two CLOCK_MONOTONIC reads around
// time.Now may be for newClock to take the pair.
const pairSlack = 20 * time.Microsecond

// newClock pairs a time.Now reading with CLOCK_MONOTONIC, read before and
// after it, and takes the middle. A process preempted between two reads
// would otherwise stamp everything it records late (or early) by the
// preemption, on a machine loaded enough for the nemesis to matter a
// millisecond or more: a child's release stamped after the parent's next
// grant reads as an overlap. It retries until the reads are within
// pairSlack, and keeps the tightest of 100 tries.
func newClock(origin int64, now func() time.Time, mono func() int64) *Clock {
	var t0 time.Time
	var mid, gap int64 = 0, math.MaxInt64
	for i := 0; i < 100 && gap > int64(pairSlack); i++ {
		before := mono()
		t := now()
		after := mono()
		if after-before < gap {
			t0, mid, gap = t, before+(after-before)/2, after-before
		}
	}
	return &Clock{t0: t0, base: Stamp(mid - origin), orig: origin}
}

// origin is the run's origin, for child processes.
func (c *Clock) origin() int64 { return c.orig }

// Now is the current Stamp.
func (c *Clock) Now() Stamp { return c.At(time.Now()) }

// At converts a time of this process (with its monotonic reading, as
// time.Now and Lease.Deadline have) to a Stamp.
func (c *Clock) At(t time.Time) Stamp { return c.base + Stamp(t.Sub(c.t0)) }
