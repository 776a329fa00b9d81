package queuetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/queue"
)

// Queuer is a driver that queues: what DriverBackend calls.
type Queuer interface {
	driver.Driver
	driver.Queuer
}

// DriverBackend returns a Backend that runs histories on key through d's
// own calls, the ones lock makes: a Join step is Join, a Try step
// Acquire, a Leave step Release (a holder) or Leave (a waiter); Holders
// runs Check for each waiter, in queue order. Every lease lasts ttl. What
// it leaves is released at t's cleanup.
//
// woken is for drivers whose Check asks the server only once a watch woke
// the waiter (ZooKeeper, etcd): a waiter that the rule grants and Check
// does not is given up to woken to be woken (on Join's wake channel) and
// checked again, so that a watch that misses its waiter's turn fails the
// test. 0 checks once.
func DriverBackend(t *testing.T, d Queuer, key string, ttl, woken time.Duration) Backend {
	return DriverBackendWaking(t, d, key, ttl, woken, 0)
}

// DriverBackendWaking is DriverBackend that also requires each waiter
// that a Leave step makes due (the rule grants it once the entry is gone:
// queue.HandOver) to be woken on Join's wake channel within wake, before
// any Check of it: a release must hand the key over or wake its new
// holders, not leave them to their next heartbeat. 0 does not require it.
// A waiter the rule does not grant is checked only when woken, as lock
// does (else taken as waiting): a Check that reads the queue renews its
// watches, and would hide a watch set that misses its turn.
func DriverBackendWaking(t *testing.T, d Queuer, key string, ttl, woken, wake time.Duration) Backend {
	b := &driverBackend{d: d, key: key, ttl: ttl, woken: woken, wake: wake, leases: map[int]*lease{}, run: time.Now().UnixNano()}
	t.Cleanup(b.cleanup)
	return b
}

type lease struct {
	l    *driver.Lease
	held bool
	wake chan struct{}
}

type driverBackend struct {
	d      Queuer
	key    string
	ttl    time.Duration
	woken  time.Duration
	wake   time.Duration
	left   bool // the last step was a Leave
	leases map[int]*lease
	run    int64
}

func (b *driverBackend) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 20*time.Second)
}

func (b *driverBackend) Do(id int, s Step) (Outcome, error) {
	ctx, cancel := b.ctx()
	defer cancel()
	b.left = s.Op == Leave
	if s.Op == Leave {
		le := b.leases[s.ID]
		if le == nil {
			return Left, fmt.Errorf("no entry #%d", s.ID)
		}
		delete(b.leases, s.ID)
		if le.held {
			return Left, b.d.Release(ctx, le.l)
		}
		return Left, b.d.Leave(ctx, le.l)
	}
	l := &driver.Lease{Key: b.key, Owner: fmt.Sprintf("%016x%016x", uint64(b.run), uint64(id)), TTL: b.ttl}
	switch s.Entry.Kind {
	case queue.Shared:
		l.Mode = driver.Shared
	case queue.Permit:
		l.Mode, l.Limit = driver.Permit, s.Entry.Limit
	}
	var err error
	wake := make(chan struct{}, 1)
	if s.Op == Try {
		err = b.d.Acquire(ctx, l)
	} else {
		err = b.d.Join(ctx, l, wake)
	}
	var held *driver.HeldError
	switch {
	case err == nil:
		b.leases[id] = &lease{l: l, held: true}
		return Granted, nil
	case errors.Is(err, driver.ErrInvalid):
		return Refused, nil
	case errors.As(err, &held):
		if s.Op == Join {
			b.leases[id] = &lease{l: l, wake: wake}
		}
		return Queued, nil
	}
	return 0, err
}

func (b *driverBackend) Holders(live, want []int) ([]int, error) {
	ctx, cancel := b.ctx()
	defer cancel()
	var out []int
	for _, id := range live {
		le := b.leases[id]
		if le == nil {
			return nil, fmt.Errorf("no entry #%d", id)
		}
		if !le.held && b.wake > 0 {
			due := slices.Contains(want, id)
			select {
			case <-le.wake:
			case <-b.after(due):
				if !due {
					continue // not woken: not checked, as lock would not
				}
				if b.left {
					return nil, fmt.Errorf("waiter #%d, due after the leave, not woken within %v", id, b.wake)
				}
			}
		}
		if !le.held {
			if err := b.check(ctx, le, slices.Contains(want, id)); err != nil {
				return nil, fmt.Errorf("check #%d: %w", id, err)
			}
		}
		if le.held {
			out = append(out, id)
		}
	}
	return out, nil
}

// check runs Check for le, a waiter, and if due (the rule grants it) and
// still held, again each time it is woken, for up to b.woken.
func (b *driverBackend) check(ctx context.Context, le *lease, due bool) error {
	deadline := time.After(b.woken)
	for {
		err := b.d.Check(ctx, le.l)
		var held *driver.HeldError
		switch {
		case err == nil:
			le.held = true
			return nil
		case !errors.As(err, &held):
			return err
		case !due || b.woken == 0:
			return nil
		}
		select {
		case <-le.wake:
		case <-deadline:
			return nil
		}
	}
}

// after returns when a waiter's wake-up is given up: at once for one the
// rule does not grant, or one due at a step that was not a Leave, else
// after b.wake.
func (b *driverBackend) after(due bool) <-chan time.Time {
	if !due || !b.left {
		return time.After(0)
	}
	return time.After(b.wake)
}

func (b *driverBackend) cleanup() {
	ctx, cancel := b.ctx()
	defer cancel()
	for _, le := range b.leases {
		if le.held {
			b.d.Release(ctx, le.l)
		} else {
			b.d.Leave(ctx, le.l)
		}
	}
}
