package nemesis

import (
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/harness/chaos"
)

// The Redis drivers (internal/redisx, lanes.go) and the memcached driver
// (driver/memcached, lanes.go) run each call on a lane: a connection of
// its own that the call's context closes when it ends, mid-request or
// not, and whose outcome is then unknown (the server may have run the
// request). lane-abort reaches it: for a while, calls made
// in the test process are cancelled, at random, 0 to 2 ms after they
// start, which on a local server lands while a request or its reply is
// in flight. The worker's checks then judge that the call returned by its
// cancellation (checkReturn) and the history that nothing it did was left
// behind.

// laneAbortUntil is when the current lane-abort window ends (unix ns; 0:
// none).
var laneAbortUntil atomic.Int64

// laneAbortP is the share of the calls cancelled in a window.
const laneAbortP = 0.3

// laneKinds adds lane-abort on the targets of the Redis drivers and of
// the memcached driver.
func (n *nemesis) laneKinds(add func(name string, w int, inject func() bool)) {
	name := n.r.tg.Name
	redis := n.r.tg.Backend == chaos.RedisBackend && (strings.HasPrefix(name, "redisnx") || strings.HasPrefix(name, "rediswatch"))
	if !redis && n.r.tg.Backend != chaos.MemcachedBackend {
		return
	}
	add("lane-abort", 3, n.laneAbort)
}

// laneAbort opens a window of 0.5 to 3 s.
func (n *nemesis) laneAbort() bool {
	d := n.between(500*time.Millisecond, 3*time.Second)
	laneAbortUntil.Store(time.Now().Add(d).UnixNano())
	return true
}

// laneAbortAt returns when a call starting now is to be cancelled, if a
// lane-abort window is open and the call is drawn.
func laneAbortAt(rng *rand.Rand) (time.Duration, bool) {
	if time.Now().UnixNano() >= laneAbortUntil.Load() || rng.Float64() >= laneAbortP {
		return 0, false
	}
	return time.Duration(rng.Int64N(int64(2 * time.Millisecond))), true
}
