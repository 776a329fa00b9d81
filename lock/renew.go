package lock

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// The renewal scheduler: one per Locker, however many leases it holds.
//
// It keeps every live lease in a heap ordered by the next moment it must
// look at it: the renewal time (see renewFraction) for auto-renewed
// leases, else the local deadline. Due
// renewals are handed, grouped, to at most maxWorkers worker goroutines
// (maxBatchWorkers for a driver that implements driver.BatchRefresher,
// which refreshes each group of up to maxBatch leases in one call, in a
// few round trips; when groups queue up, a worker takes up to maxMerge of
// them in one call). A renewal not done when its lease has half its
// validity left is counted late, and logged (watchLate, armed when the
// renewal is queued, so that one still waiting for a worker counts too,
// and so does a lease lost before a worker took its renewal): the Locker
// is falling behind. A lease whose deadline passes before a refresh succeeds
// is lost then, whatever its refresh is doing.
type scheduler struct {
	lk    *Locker
	batch driver.BatchRefresher

	mu      sync.Mutex
	h       leaseHeap
	jobs    []renewJob
	running int // workers running
	stopped bool
	wake    chan struct{}
	// wakeAt is when the loop's timer fires next: schedule wakes the loop
	// only for a lease due before it, so that a Lock+Unlock cycle on a
	// Locker holding nothing else does not wake it every time.
	wakeAt  time.Time
	ctx     context.Context // cancelled by stop
	cancel  context.CancelFunc
	workers group // the loop and the workers

	// Late renewals (see late): counted since the last log, and when the
	// next log may be written.
	lateN     int
	lateLogAt time.Time
}

const (
	// renewFraction places a renewal: 1/renewFraction of the way from the
	// moment the last successful grant or refresh was sent to the lease's
	// local deadline. That is every TTL/3 where the backend applies the TTL
	// as it is, and more often where it gives less (memcached's whole
	// seconds, a ZooKeeper session timeout shorter than the TTL).
	renewFraction = 3
	// renewAhead groups renewals: one due within validity/renewAhead is
	// taken with the due ones, so that leases granted close together are
	// refreshed together.
	renewAhead = 30
	// retryFraction paces a failed renewal's retries: every
	// validity/retryFraction, and at least minRetryDelay apart.
	retryFraction = 10

	maxWorkers      = 16   // concurrent refresh calls per Locker
	maxBatchWorkers = 4    // concurrent RefreshBatch calls per Locker
	maxBatch        = 1000 // leases per RefreshBatch call, unless jobs queue up
	// maxMerge is how many queued jobs a worker of a driver.BatchRefresher
	// takes at once when renewals queue up (the workers are behind): one
	// RefreshBatch call of up to maxMerge*maxBatch leases, which the driver
	// sends in as few round trips as one (a Redis pipeline), so that the
	// leases renewed per round trip grow with the backlog.
	maxMerge      = 4
	maxSingleJob  = 32 // leases per job for drivers without batches
	minRetryDelay = 5 * time.Millisecond
	// minRenewRoom is the least validity, less the drift margin, that a
	// TTL must give: renewals come at 1/renewFraction of it.
	minRenewRoom = 3 * time.Millisecond
	// lateLogEvery is the least time between two logs of late renewals.
	lateLogEvery = 10 * time.Second
)

// renewJob refreshes leases to ttl, which Validate said gives validity v.
// Its late watches (watchLate, one per job merged into it) were armed when
// it was queued; run stops them when its refresh returns.
type renewJob struct {
	ttl, v  time.Duration
	leases  []*Lease
	watches []func()
}

func newScheduler(lk *Locker) *scheduler {
	s := &scheduler{lk: lk, wake: make(chan struct{}, 1), wakeAt: time.Now().Add(time.Hour)}
	s.batch, _ = lk.d.(driver.BatchRefresher)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.workers.add()
	go s.loop()
	return s
}

// schedule (re)computes when to look at l next, from its current state.
// Renewals come at renewFraction, counted on the validity the backend
// applied, which may be much shorter than the TTL.
func (s *scheduler) schedule(l *Lease) {
	l.mu.Lock()
	ended, renew := l.err != nil, l.autoRenew && !l.unlocking
	deadline, ttl, v := l.deadline, l.ttl, l.validity
	renewAt := l.start.Add(deadline.Sub(l.start) / renewFraction)
	l.mu.Unlock()

	s.mu.Lock()
	defer s.mu.Unlock()
	if ended || s.stopped {
		s.removeLocked(l)
		return
	}
	due := deadline
	if renew && !l.renewing {
		if !l.retryAt.IsZero() {
			renewAt = l.retryAt
		}
		if renewAt.Before(due) {
			due = renewAt
		}
	}
	l.due, l.deadlineCopy, l.ttlCopy, l.validCopy = due, deadline, ttl, v
	l.renewDue = renew && !l.renewing
	if l.idx >= 0 {
		heap.Fix(&s.h, l.idx)
	} else {
		heap.Push(&s.h, l)
	}
	if s.h[0] == l && due.Before(s.wakeAt) {
		s.wakeAt = due // the loop sets it again when it wakes
		s.poke()
	}
}

func (s *scheduler) remove(l *Lease) {
	s.mu.Lock()
	s.removeLocked(l)
	s.mu.Unlock()
}

func (s *scheduler) removeLocked(l *Lease) {
	if l.idx >= 0 {
		heap.Remove(&s.h, l.idx)
	}
}

func (s *scheduler) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *scheduler) loop() {
	defer s.workers.done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		expired, lateNow, next := s.collect(time.Now())
		for _, ls := range lateNow {
			s.late(ls)
		}
		for _, l := range expired {
			// The deadline is checked again under the lease's lock: a
			// refresh may have moved it since collect looked.
			if !l.expire() {
				s.schedule(l)
			}
		}
		t.Reset(next)
		select {
		case <-s.ctx.Done():
			return
		case <-s.wake:
		case <-t.C:
		}
	}
}

// collect takes the leases due at now: expired ones are returned, renewals
// are queued as jobs (those late already are returned in lateNow, for the
// caller to count: late takes s.mu). It returns how long to sleep until the
// next one.
func (s *scheduler) collect(now time.Time) (expired []*Lease, lateNow [][]*Lease, next time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	type group struct{ ttl, v time.Duration }
	groups := map[group][]*Lease{}
	for len(s.h) > 0 {
		l := s.h[0]
		// See renewAhead.
		ahead := time.Duration(0)
		if l.renewDue {
			ahead = l.validCopy / renewAhead
		}
		if l.due.After(now.Add(ahead)) {
			break
		}
		if !now.Before(l.deadlineCopy) {
			heap.Pop(&s.h)
			expired = append(expired, l)
			continue
		}
		// Keep watching the deadline meanwhile; renew unless a Refresh of
		// the lease is under way (it schedules the lease again when done).
		renew := false
		select {
		case l.refreshing <- struct{}{}:
			renew = true
		default:
		}
		l.renewing, l.renewDue, l.due = renew, false, l.deadlineCopy
		heap.Fix(&s.h, 0)
		if renew {
			g := group{l.ttlCopy, l.validCopy}
			groups[g] = append(groups[g], l)
		}
	}
	size := maxSingleJob
	if s.batch != nil {
		size = maxBatch
	}
	for g, ls := range groups {
		for len(ls) > 0 {
			n := min(len(ls), size)
			j := renewJob{ttl: g.ttl, v: g.v, leases: ls[:n:n]}
			first := j.leases[0].deadlineCopy
			for _, l := range j.leases {
				if l.deadlineCopy.Before(first) {
					first = l.deadlineCopy
				}
			}
			stop, already := s.watchLate(j.leases, first, g.v)
			if already {
				lateNow = append(lateNow, j.leases)
			} else {
				j.watches = []func(){stop}
			}
			s.jobs = append(s.jobs, j)
			ls = ls[n:]
		}
	}
	limit := maxWorkers
	if s.batch != nil {
		limit = maxBatchWorkers
	}
	for s.running < limit && s.running < len(s.jobs) && !s.stopped {
		if !s.workers.add() {
			break
		}
		s.running++
		go s.work()
	}
	next = time.Hour
	if len(s.h) > 0 {
		next = max(s.h[0].due.Sub(now), 0)
	}
	s.wakeAt = now.Add(next)
	return expired, lateNow, next
}

// work runs queued renewal jobs until none is left.
func (s *scheduler) work() {
	defer s.workers.done()
	for {
		s.mu.Lock()
		if len(s.jobs) == 0 || s.stopped {
			s.running--
			s.mu.Unlock()
			return
		}
		j := s.takeLocked()
		s.mu.Unlock()
		s.run(j)
	}
}

// takeLocked takes the first queued job, merged with those after it of
// the same TTL up to maxMerge*maxBatch leases for a batching driver.
func (s *scheduler) takeLocked() renewJob {
	j := s.jobs[0]
	s.jobs = s.jobs[1:]
	for s.batch != nil && len(s.jobs) > 0 {
		next := s.jobs[0]
		if next.ttl != j.ttl || next.v != j.v || len(j.leases)+len(next.leases) > maxMerge*maxBatch {
			break
		}
		j.leases = append(j.leases, next.leases...)
		j.watches = append(j.watches, next.watches...)
		s.jobs = s.jobs[1:]
	}
	return j
}

func (s *scheduler) run(j renewJob) {
	defer j.stopWatches()
	start := time.Now()
	// Each deadline is moved to what this refresh gives (beginRefresh). No
	// refresh is useful past the last of them; each lease whose own
	// deadline passes meanwhile is lost then, whatever the call does.
	var (
		ls   []*Lease
		last time.Time
	)
	for _, l := range j.leases {
		d, err := l.beginRefresh("renew", start, j.v)
		if err != nil { // ended meanwhile
			s.done(l, false, j.v)
			continue
		}
		if len(ls) == 0 || d.After(last) {
			last = d
		}
		ls = append(ls, l)
	}
	if len(ls) == 0 {
		return
	}
	ctx, cancel := context.WithDeadline(s.ctx, last)
	defer cancel()
	dls := make([]*driver.Lease, len(ls))
	for i, l := range ls {
		dls[i] = l.dl
	}
	errs := make([]error, len(ls))
	// Each lease's own validity: one lease's failed refresh (validity 0)
	// must not shorten the others'.
	validity := make([]time.Duration, len(ls))
	if s.batch != nil && len(dls) > 1 {
		var v time.Duration
		v, errs = s.batch.RefreshBatch(ctx, dls, j.ttl)
		if len(errs) != len(dls) {
			err := fmt.Errorf("driver returned %d results for a batch of %d", len(errs), len(dls))
			errs = make([]error, len(dls))
			for i := range errs {
				errs[i] = err
			}
		}
		for i := range validity {
			validity[i] = v
		}
	} else {
		for i, dl := range dls {
			validity[i], errs[i] = s.lk.d.Refresh(ctx, dl, j.ttl)
		}
	}
	for i, l := range ls {
		err := l.endRefresh(ctx, "renew", j.ttl, j.v, start, validity[i], errs[i])
		failed := err != nil && !errors.Is(err, ErrNotHeld)
		if failed {
			s.lk.renewalFailed(l)
			s.lk.logWarn("renewal failed; retrying", l.dl.Key, errs[i])
		}
		s.done(l, failed, j.v)
	}
}

func (j renewJob) stopWatches() {
	for _, stop := range j.watches {
		stop()
	}
}

// watchLate reports ls late (see late) if their refresh, queued now, has
// not returned by the time the first of their deadlines is less than
// half their validity v away: renewals come when two thirds of it are left,
// so the Locker is then behind its leases by a quarter of the room it has,
// and a lease is lost if it falls behind by the rest. It returns the
// function that ends the watch; or, when they are late already, reports
// that (now) for the caller to count them.
func (s *scheduler) watchLate(ls []*Lease, first time.Time, v time.Duration) (stop func(), now bool) {
	wait := time.Until(first.Add(-v / 2))
	if wait <= 0 {
		return nil, true
	}
	t := time.AfterFunc(wait, func() { s.late(ls) })
	return func() { t.Stop() }, false
}

// late counts the renewals of ls as late (dlock.renewals.late), and logs
// a warning that renewals fall behind, at most once every lateLogEvery
// with the count since the last one: the Locker cannot keep up with its
// leases (too many for its backend or its machine, or a slow backend),
// and will lose them if it falls further behind.
//
// A lease unlocked meanwhile is not counted: its renewal was no longer
// wanted. One lost is, whether or not a worker had taken its renewal: one
// lost to its deadline was lost because the renewal came too late.
func (s *scheduler) late(ls []*Lease) {
	ls = stillWanted(ls)
	if len(ls) == 0 {
		return
	}
	s.lk.renewalsLate(ls)
	now := time.Now()
	s.mu.Lock()
	s.lateN += len(ls)
	if now.Before(s.lateLogAt) {
		s.mu.Unlock()
		return
	}
	n, held, queued := s.lateN, len(s.h), 0
	for _, j := range s.jobs {
		queued += len(j.leases)
	}
	s.lateN, s.lateLogAt = 0, now.Add(lateLogEvery)
	s.mu.Unlock()
	s.lk.logLate(n, held, queued)
}

// stillWanted returns the leases of ls whose renewal is still wanted, or
// was until they expired (see late).
func stillWanted(ls []*Lease) []*Lease {
	out := make([]*Lease, 0, len(ls))
	for _, l := range ls {
		l.mu.Lock()
		wanted := !l.unlocking && (l.err == nil || errors.Is(l.err, ErrLost))
		l.mu.Unlock()
		if wanted {
			out = append(out, l)
		}
	}
	return out
}

// done ends the scheduler's renewal of l: the lease's refresh slot is freed
// and the lease is scheduled again (after a failure, see retryFraction;
// at its deadline if that is sooner).
func (s *scheduler) done(l *Lease, failed bool, v time.Duration) {
	s.mu.Lock()
	l.renewing = false
	l.retryAt = time.Time{}
	if failed {
		l.retryAt = time.Now().Add(max(v/retryFraction, minRetryDelay))
	}
	s.mu.Unlock()
	<-l.refreshing
	s.schedule(l)
}

// stop ends the loop and the workers; a renewal under way is cut short.
func (s *scheduler) stop() {
	s.mu.Lock()
	s.stopped = true
	for _, j := range s.jobs {
		j.stopWatches()
	}
	s.jobs = nil
	s.mu.Unlock()
	s.workers.stop()
	s.cancel()
}

// leaseHeap orders leases by due time.
type leaseHeap []*Lease

func (h leaseHeap) Len() int           { return len(h) }
func (h leaseHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h leaseHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *leaseHeap) Push(x any) {
	l := x.(*Lease)
	l.idx = len(*h)
	*h = append(*h, l)
}
func (h *leaseHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	l.idx = -1
	*h = old[:len(old)-1]
	return l
}
