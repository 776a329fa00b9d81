package postgres

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// The sweep deletes what keys used once leave (schema.sql, sweep3): a key
// whose last grant is sweepKeep old and that nothing depends on any more
// loses its row (with its expired grant), its expired entries and its
// tombstones. It runs in the
// background, one at a time per Locker, after every sweepSteps steps and
// on the first step sweepPeriod after the last sweep, and deletes up to
// sweepLimit keys. Renewals count as steps, so a Locker that only holds
// leases sweeps too; a Locker that makes no call sweeps nothing (another
// one's sweep covers every key of the schema).
const (
	sweepKeep   = time.Minute
	sweepSteps  = 200
	sweepPeriod = 10 * time.Second
	sweepLimit  = 500
	sweepBound  = 10 * time.Second // how long one sweep may take
)

// sweeper starts the driver's sweeps.
type sweeper struct {
	steps atomic.Int64
	ctx   context.Context // ended by Close
	stop  context.CancelFunc
	wg    sync.WaitGroup

	mu      sync.Mutex
	last    time.Time // the last sweep's start
	running bool
	closed  bool
}

func newSweeper() *sweeper {
	ctx, cancel := context.WithCancel(context.Background())
	return &sweeper{ctx: ctx, stop: cancel, last: time.Now()}
}

// tick counts a step, and starts a sweep when one is due and none runs.
func (d *pgDriver) tick() {
	s := d.sweep
	n := s.steps.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	due := n%sweepSteps == 0 || time.Since(s.last) >= sweepPeriod
	if !due || s.running || s.closed {
		return
	}
	s.running, s.last = true, time.Now()
	s.wg.Add(1)
	go d.sweepOnce()
}

// sweepOnce runs one sweep. Its failure is not reported: the next one
// tries again, and the steps purge each key they touch anyway.
func (d *pgDriver) sweepOnce() {
	s := d.sweep
	defer func() {
		s.mu.Lock()
		s.running = false
		s.mu.Unlock()
		s.wg.Done()
	}()
	ctx, cancel := context.WithTimeout(s.ctx, sweepBound)
	defer cancel()
	d.run(ctx, d.q.sweep, int64(sweepLimit), micros(sweepKeep))
}

// close ends a running sweep and waits for it; no sweep starts after.
func (s *sweeper) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.stop()
	s.wg.Wait()
}
