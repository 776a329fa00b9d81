package chaos

import (
	"context"
	"errors"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// The negative controls (controls.go) run through the scenarios as
// targets. Each must be caught for its own reason, in a scenario built to
// exercise that reason every time (catches); TestControls fails otherwise,
// so a checker that cannot fail fails the build.

var controlCatches = map[string]map[string]func(Row) error{
	// The key has no expiry: a holder that dies leaves it forever.
	"setnx-del": {"holder-kill": caughtOrphanNoRecovery},
	// Killed between SETNX and EXPIRE: a key without expiry.
	"setnx-then-expire": {"holder-kill": caughtOrphanNoRecovery},
	// A wakes past its TTL, its release DELs B's lock, C enters.
	"setnx-ex-del": {"holder-pause/mid-write": caughtUnsafeOverlap},
	// A paused between its GET and its DEL deletes B's lock.
	"get-compare-del": {"holder-pause/mid-release": caughtUnsafeOverlap},
	// A checks its own timestamp, pauses, then DELs B's lock.
	"getset-timestamp": {"holder-pause/mid-release": caughtUnsafeOverlap},
	// A wakes past its TTL, its plain delete removes B's lock.
	"memcached-add-delete": {"holder-pause/mid-write": caughtUnsafeOverlap},
}

func init() {
	for _, c := range Controls {
		open := c.Open
		register(&target{
			name: c.Name, backend: c.Backend, control: true, ttl: c.TTL, gaps: c.Gaps,
			open: func(ctx context.Context, addrs []string, ttl time.Duration, h Hooks) (Locker, error) {
				return open(ctx, addrs, lock.Options{TTL: ttl}, h)
			},
			catches: controlCatches[c.Name],
		})
	}
}

func caughtUnsafeOverlap(r Row) error {
	if r.Report.UnsafeOverlaps == 0 {
		return errors.New("no unsafe overlap: the released lock of another owner went unnoticed")
	}
	return nil
}

func caughtOrphanNoRecovery(r Row) error {
	if r.Orphans == 0 {
		return errors.New("no orphan found: the lock key without expiry went unnoticed")
	}
	if r.Recovered {
		return errors.New("the key was granted again although its lock had no expiry")
	}
	return nil
}
