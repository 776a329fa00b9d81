package redisnx

import (
	"context"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/redis/go-redis/v9"
)

// A queued wait's follow-up: while the wait goes on, a goroutine blocks on
// the wait's grant list, P{K}:g:OWNER:NONCE (its format: prelude.lua), and
// the release that hands the key to the waiter pushes the grant there, so
// that the reply to the BLPOP is the grant and the waiter makes no request
// more. Each BLPOP is pipelined behind an LLEN of the list: a grant that
// BLPOP takes from a list that LLEN found empty was pushed after the pair
// was sent, so the grant's TTL, which the push started, runs from after
// that moment, and its validity is counted from it. (A grant found in the
// list already, or a reply that does not parse, only wakes the waiter,
// whose next step reads the grant from the server.)
//
// Over lanes (driver.Caps.ReturnsAtContextEnd) a wait has no follow-up goroutine: each of
// its steps sends the LLEN, wait.lua and the BLPOP in one pipeline
// (inline.go). Otherwise:
//
// A follow-up holds one connection of the client's pool while it blocks.
// A Locker runs at most half the pool's size at once (blockers); a wait
// beyond that, or over a client whose read timeout is shorter than a
// BLPOP's, or once the server refused a list's command (refused.go), has
// no grant list (NONCE 0) and is woken on its inbox as before.

// listInfix is between the lock key and OWNER:NONCE in a grant list's name.
const listInfix = ":g:"

// blockFor is how long one BLPOP blocks at most (whole seconds: go-redis
// sends BLPOP's timeout so); the follow-up then sends the next one.
const blockFor = driver.Heartbeat

// follow is a queued wait's follow-up.
type follow struct {
	keys    [7]string // wait.lua's keys with the grant list last
	nonce   string
	wake    chan<- struct{}
	slots   chan struct{} // the Locker's blockers: one is held until end
	lists   *lists        // the Locker's switch (refused.go)
	started bool          // the goroutine was started (steps only)
	running atomic.Bool   // the goroutine may be blocked on the list
	done    atomic.Bool   // the wait ended
	got     atomic.Pointer[pushed]

	blocking atomic.Bool // an inline step is under way (inline.go)
	kicking  atomic.Bool // a kick's push is under way
}

// pushed is a grant taken from the grant list: its token, and a moment
// before the push (the send of the LLEN and BLPOP that took it).
type pushed struct {
	token uint64
	sent  time.Time
}

// newBlockers returns the blockers of a Locker over client: half its pool
// size, none when its read timeout would cut a BLPOP short.
func newBlockers(client redis.UniversalClient) chan struct{} {
	var pool int
	var read time.Duration
	switch c := client.(type) {
	case *redis.Client:
		pool, read = c.Options().PoolSize, c.Options().ReadTimeout
	case *redis.ClusterClient:
		pool, read = c.Options().PoolSize, c.Options().ReadTimeout
	case *redis.Ring:
		pool, read = c.Options().PoolSize, c.Options().ReadTimeout
	}
	if pool == 0 { // a Ring's options as given: go-redis's default
		pool = 10 * runtime.GOMAXPROCS(0)
	}
	if read > 0 && read < blockFor+500*time.Millisecond { // 0: none
		pool = 0
	}
	return make(chan struct{}, pool/2)
}

// newFollow returns the follow-up of a wait with keys (wait.lua's), or
// nil when the Locker's blockers are all taken or its grant lists are off.
func newFollow(slots chan struct{}, ls *lists, keys *keyNames, owner string, wake chan<- struct{}) *follow {
	if ls.off.Load() {
		return nil
	}
	select {
	case slots <- struct{}{}:
	default:
		return nil
	}
	f := &follow{nonce: strconv.FormatUint(rand.Uint64(), 10), wake: wake, slots: slots, lists: ls}
	copy(f.keys[:6], keys[:6])
	f.keys[6] = keys[0] + listInfix + owner + ":" + f.nonce
	return f
}

// nonceOf returns f's nonce, "0" for no follow-up.
func nonceOf(f *follow) string {
	if f == nil {
		return "0"
	}
	return f.nonce
}

// waitKeys returns the keys of a step's script: those of keys, and the
// grant list when the goroutine may be blocked on it (the script pushes
// "x" there, which unblocks it, when it ends the wait).
func (f *follow) waitKeys(keys *keyNames) []string {
	if f == nil || !f.running.Load() {
		return keys[:6]
	}
	return f.keys[:]
}

// start starts the goroutine, unless it runs or the wait ended.
func (f *follow) start(c redis.UniversalClient) {
	if f == nil || f.done.Load() || f.running.Load() {
		return
	}
	f.started = true
	f.running.Store(true)
	go f.run(c)
}

// end ends the wait's follow-up: no BLPOP is sent after the one under way.
func (f *follow) end() {
	if f != nil && !f.done.Swap(true) {
		<-f.slots
	}
}

// take returns the grant the goroutine took, if any.
func (f *follow) take() *pushed {
	if f == nil {
		return nil
	}
	return f.got.Swap(nil)
}

// run blocks on the grant list until something is pushed there, the
// wait ends or a call fails; it wakes the waiter when it stops for
// anything but an "x".
func (f *follow) run(c redis.UniversalClient) {
	defer f.running.Store(false)
	ctx := context.Background()
	for !f.done.Load() {
		sent := time.Now()
		var n *redis.IntCmd
		var v *redis.StringSliceCmd
		_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			n = p.LLen(ctx, f.keys[6])
			v = p.BLPop(ctx, blockFor, f.keys[6])
			return nil
		})
		if err == redis.Nil {
			continue // the BLPOP timed out
		}
		f.lists.refused(n.Err(), v.Err()) // then the waiter's step drops f
		if err == nil && len(v.Val()) == 2 {
			if v.Val()[1] == "x" {
				return
			}
			if tok, ok := f.parse(v.Val()[1]); ok && n.Val() == 0 {
				f.got.Store(&pushed{token: tok, sent: sent})
			}
		}
		f.signal()
		return
	}
}

// parse reads a grant pushed to the list, "NONCE TOKEN".
func (f *follow) parse(v string) (uint64, bool) {
	nonce, tok, ok := strings.Cut(v, " ")
	if !ok || nonce != f.nonce {
		return 0, false
	}
	t, err := strconv.ParseUint(tok, 10, 64)
	return t, err == nil && t > 0
}

func (f *follow) signal() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}
