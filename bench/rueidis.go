package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"
)

// rueidislock (github.com/redis/rueidis/rueidislock): a Redis lock over
// rueidis, the other Go Redis client. It takes KeyMajority of
// 2*KeyMajority-1 keys ("<prefix>:<i>:<name>", SET NX PXAT in a script that
// also GETs the key, so that the client tracks it), extends them every
// KeyValidity/2 and waits for a release through client-side caching: the
// server's invalidation of a tracked key wakes the waiters, which try
// again. A lock is a context: WithContext returns it with a cancel
// function, and the cancel releases the keys and waits for the deletes.
//
// Its documented defaults: KeyMajority 2 (three keys, on one server too),
// KeyValidity 5s, ExtendInterval 2.5s, TryNextAfter 20ms, client-side
// caching with tracking OPTOUT (NoLoopTracking off). Its README's example
// for one Redis server sets KeyMajority 1 and NoLoopTracking (Redis ≥
// 7.0.5): "(1 key)" is that configuration.

// A waiter of rueidislock's wakes only on the server's invalidation of a
// key it tracks. An attempt that fails otherwise (each key's script has
// TryNextAfter, 20 ms, to answer: a loaded machine misses it) may leave it
// waiting for an invalidation that never comes (its own delete of the key
// does not notify itself under NOLOOP), until its context ends. The bench
// gives such a wait rueidisStall (the keys' validity: any key the failed
// attempt set has expired by then) and tries again, and counts it: its
// Lock's time includes the stall, and the report says how many there were
// (rueidisStalls).
const rueidisStall = 5 * time.Second

// rueidisStalls counts, per library name, the waits cut off by
// rueidisStall.
var rueidisStalls sync.Map // string -> *atomic.Int64

// openRueidislock makes one Locker (one rueidis client, standing for one
// process) with opt's settings and the server's address.
func openRueidislock(name string, opt rueidislock.LockerOption) func(context.Context, string) (client, error) {
	stalls, _ := rueidisStalls.LoadOrStore(name, new(atomic.Int64))
	return func(ctx context.Context, addr string) (client, error) {
		opt := opt
		opt.ClientOption.InitAddress = []string{addr}
		l, err := rueidislock.NewLocker(opt)
		if err != nil {
			return nil, fmt.Errorf("rueidislock %s: %w", addr, err)
		}
		return &rueidislockClient{l: l, stalls: stalls.(*atomic.Int64)}, nil
	}
}

// rueidisNotes says, for the report, how many waits stalled.
func rueidisNotes() []string {
	var notes []string
	rueidisStalls.Range(func(k, v any) bool {
		if n := v.(*atomic.Int64).Load(); n > 0 {
			notes = append(notes, fmt.Sprintf("%s: %d waits got no wake-up for %v and were tried again (a try whose key scripts missed TryNextAfter waits for an invalidation that never comes)", k, n, rueidisStall))
		}
		return true
	})
	slices.Sort(notes)
	return notes
}

// rueidislockReadme is the README's configuration for one Redis server.
var rueidislockReadme = rueidislock.LockerOption{KeyMajority: 1, NoLoopTracking: true, ClientOption: rueidis.ClientOption{}}

type rueidislockClient struct {
	l      rueidislock.Locker
	stalls *atomic.Int64
}

// errRueidisLost is an Unlock's error when the lock's context ended while
// it was held: rueidislock found it lost (a key deleted or expired).
var errRueidisLost = errors.New("rueidislock: the lock's context ended while held")

// Lock waits for key. The lock's context is derived from the one passed to
// WithContext, and ends (releasing the keys) when that one does: the
// bench's Lock contexts end right after the grant, so the lock gets a
// context of its own, which ctx ends only while the wait is under way.
func (c *rueidislockClient) Lock(ctx context.Context, key string) (held, error) {
	for {
		src, stop := context.WithCancel(context.WithoutCancel(ctx))
		waiting := context.AfterFunc(ctx, stop)
		stalled := time.AfterFunc(rueidisStall, stop)
		lctx, release, err := c.l.WithContext(src, key)
		if !waiting() { // ctx ended: the wait is over, a grant given back
			stalled.Stop()
			if err == nil {
				release()
			}
			stop()
			return nil, errors.Join(ctx.Err(), err)
		}
		if !stalled.Stop() {
			if err == nil {
				release()
			}
			stop()
			c.stalls.Add(1)
			continue
		}
		if err != nil {
			stop()
			return nil, err
		}
		return &rueidisHeld{ctx: lctx, release: release, stop: stop}, nil
	}
}

func (c *rueidislockClient) Close() error { c.l.Close(); return nil }

type rueidisHeld struct {
	ctx           context.Context
	release, stop context.CancelFunc
}

// Unlock releases the keys; a lock whose context had already ended was
// lost while held, and says so.
func (h *rueidisHeld) Unlock(context.Context) error {
	lost := h.ctx.Err()
	h.release()
	h.stop()
	if lost != nil {
		return fmt.Errorf("%w: %w", errRueidisLost, context.Cause(h.ctx))
	}
	return nil
}
