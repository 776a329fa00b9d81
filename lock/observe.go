package lock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/dlock-go/dlock/driver"
)

// Metrics and logs (see "Metrics and logs" in the package doc).
//
// Every measurement's attributes are enumerations (the driver, the mode,
// an outcome or a cause), so their sets are made once per Locker, in New,
// with the option slices that carry them: recording passes a slice that
// exists already, and allocates nothing of its own. Only Options.MetricKeys
// makes a set per measurement, for the key.

// meterName is the instrumentation scope of dlock's instruments.
const meterName = "github.com/dlock-go/dlock/lock"

// The values of the attributes, by index.
const (
	outGranted = iota
	outNotAcquired
	outCanceled
	outError
	nOutcomes
)

const (
	endUnlocked = iota
	endLost
	endClosed
	endDetached
	nEnds
)

const (
	lostExpired = iota
	lostNotHeld
	lostDriver
	nLostCauses
)

const nModes = int(driver.Permit) + 1

var (
	outcomeNames = [nOutcomes]string{"granted", "not_acquired", "canceled", "error"}
	endNames     = [nEnds]string{"unlocked", "lost", "closed", "detached"}
	lostNames    = [nLostCauses]string{"expired", "not_held", "driver"}
)

// attrs is one attribute set, with the option slices that pass it.
type attrs struct {
	set attribute.Set
	rec []metric.RecordOption
	add []metric.AddOption
}

func newAttrs(kvs ...attribute.KeyValue) attrs {
	s := attribute.NewSet(kvs...)
	return attrs{set: s, rec: []metric.RecordOption{metric.WithAttributeSet(s)}, add: []metric.AddOption{metric.WithAttributeSet(s)}}
}

// metrics holds a Locker's instruments, made once by New. A nil *metrics
// (no MeterProvider) records nothing.
type metrics struct {
	keys bool // Options.MetricKeys

	wait, hold                       metric.Float64Histogram
	held                             metric.Int64UpDownCounter
	lost, renewFailed, releaseFailed metric.Int64Counter
	renewLate                        metric.Int64Counter

	waitAttrs    [nModes][2][nOutcomes]attrs // mode, blocking, outcome
	holdAttrs    [nModes][nEnds]attrs
	heldAttrs    [nModes]attrs
	lostAttrs    [nModes][nLostCauses]attrs
	renewAttrs   [nModes]attrs
	releaseAttrs [nModes][2]attrs // mode, background
}

// newMetrics makes the instruments of a Locker over the driver named
// name. An instrument the provider fails to make is replaced by a no-op
// one, and the error returned.
func newMetrics(mp metric.MeterProvider, name string, keys bool) (*metrics, error) {
	if mp == nil {
		return nil, nil
	}
	meter := mp.Meter(meterName)
	m := &metrics{keys: keys}
	var errs []error
	hist := func(name, desc string, bounds ...float64) metric.Float64Histogram {
		h, err := meter.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(bounds...))
		if err != nil || h == nil {
			errs = append(errs, err)
			h = noop.Float64Histogram{}
		}
		return h
	}
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := meter.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		if err != nil || c == nil {
			errs = append(errs, err)
			c = noop.Int64Counter{}
		}
		return c
	}
	m.wait = hist("dlock.lock.wait.duration",
		"Time from the start of a Lock, TryLock, RLock, TryRLock, Acquire or TryAcquire call to its grant or failure.",
		0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
	m.hold = hist("dlock.lock.hold.duration",
		"Time from a lease's grant (or resumption) to its end.",
		0.001, 0.01, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 14400, 86400)
	held, err := meter.Int64UpDownCounter("dlock.leases.held", metric.WithUnit("{lease}"),
		metric.WithDescription("Leases held through the Locker: granted or resumed and not yet ended."))
	if err != nil || held == nil {
		errs = append(errs, err)
		held = noop.Int64UpDownCounter{}
	}
	m.held = held
	m.lost = counter("dlock.leases.lost", "{lease}",
		"Leases lost: their local deadline passed, the backend no longer had the grant, or the driver reported the loss.")
	m.renewFailed = counter("dlock.renewals.failed", "{renewal}",
		"Automatic renewals that failed for a reason other than the grant being gone, and are retried.")
	m.renewLate = counter("dlock.renewals.late", "{renewal}",
		"Automatic renewals not done by the time their lease had half its validity left (they are due with two thirds left): the Locker is falling behind its leases, which it loses if it falls behind by the rest.")
	m.releaseFailed = counter("dlock.releases.failed", "{release}",
		"Releases that failed: an Unlock's (retried in the background), or a background release that gave up (the key is left to its TTL).")

	drv := attribute.String("dlock.driver", name)
	for mode := range nModes {
		md := attribute.String("dlock.mode", driver.Mode(mode).String())
		for b := range 2 {
			for o := range nOutcomes {
				m.waitAttrs[mode][b][o] = newAttrs(drv, md, attribute.Bool("dlock.blocking", b == 1), attribute.String("dlock.outcome", outcomeNames[o]))
			}
			m.releaseAttrs[mode][b] = newAttrs(drv, md, attribute.Bool("dlock.background", b == 1))
		}
		for e := range nEnds {
			m.holdAttrs[mode][e] = newAttrs(drv, md, attribute.String("dlock.end", endNames[e]))
		}
		for c := range nLostCauses {
			m.lostAttrs[mode][c] = newAttrs(drv, md, attribute.String("dlock.cause", lostNames[c]))
		}
		m.heldAttrs[mode] = newAttrs(drv, md)
		m.renewAttrs[mode] = newAttrs(drv, md)
	}
	if err := errors.Join(errs...); err != nil {
		return m, fmt.Errorf("dlock: metrics: %w", err)
	}
	return m, nil
}

func modeIndex(m driver.Mode) int { return min(int(m), nModes-1) }

func boolIndex(b bool) int {
	if b {
		return 1
	}
	return 0
}

// withKey is a's set with the key added.
func withKey(a *attrs, key string) attribute.Set {
	return attribute.NewSet(append(a.set.ToSlice(), attribute.String("dlock.key", key))...)
}

func (m *metrics) record(ctx context.Context, h metric.Float64Histogram, a *attrs, key string, v float64) {
	if !h.Enabled(ctx) {
		return
	}
	if m.keys {
		h.Record(ctx, v, metric.WithAttributeSet(withKey(a, key)))
		return
	}
	h.Record(ctx, v, a.rec...)
}

type adder interface {
	Add(context.Context, int64, ...metric.AddOption)
	Enabled(context.Context) bool
}

func (m *metrics) add(ctx context.Context, c adder, a *attrs, key string, n int64) {
	if !c.Enabled(ctx) {
		return
	}
	if m.keys {
		c.Add(ctx, n, metric.WithAttributeSet(withKey(a, key)))
		return
	}
	c.Add(ctx, n, a.add...)
}

// outcome classifies the result of an acquisition call.
func outcome(err error) int {
	switch {
	case err == nil:
		return outGranted
	case errors.Is(err, ErrInvalid):
		return outError
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded), errors.Is(err, ErrClosed):
		return outCanceled
	case errors.Is(err, ErrHeld), errors.Is(err, driver.ErrNotHeld):
		// Held at the last attempt, or a late grant that had expired.
		return outNotAcquired
	}
	return outError
}

// endOf classifies the error a lease ended with (see Lease.end).
func endOf(err error) int {
	if e, ok := err.(*Error); ok {
		switch e.Kind {
		case ErrLost:
			return endLost
		case ErrClosed:
			return endClosed
		case ErrDetached:
			return endDetached
		}
	}
	return endUnlocked
}

// packageName is the name of d's type's package, the name of a driver
// whose Caps give none.
func packageName(d driver.Driver) string {
	t := strings.TrimLeft(fmt.Sprintf("%T", d), "*")
	if pkg, _, ok := strings.Cut(t, "."); ok && pkg != "" {
		return pkg
	}
	return "unknown"
}

// acquire is a Lock, TryLock, RLock, TryRLock, Acquire or TryAcquire call
// (doAcquire), timed for dlock.lock.wait.duration.
func (lk *Locker) acquire(parent context.Context, op, key string, mode driver.Mode, limit int, wait bool, opts []Option) (*Lease, error) {
	switch {
	case lk == nil:
		return nil, newError(op, key, ErrInvalid, errNilLocker)
	case parent == nil:
		return nil, newError(op, key, ErrInvalid, errNilContext)
	}
	if lk.m == nil {
		return lk.doAcquire(parent, op, key, mode, limit, wait, opts)
	}
	t0 := time.Now()
	l, err := lk.doAcquire(parent, op, key, mode, limit, wait, opts)
	lk.m.record(parent, lk.m.wait, &lk.m.waitAttrs[modeIndex(mode)][boolIndex(wait)][outcome(err)], key, time.Since(t0).Seconds())
	return l, err
}

// granted counts l, just registered by op, as held (unless it has ended
// already), and logs it.
func (lk *Locker) granted(op string, l *Lease) {
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return
	}
	l.registered = true
	if lk.m != nil {
		l.grantedAt = time.Since(monoBase)
	}
	l.mu.Unlock()
	if lk.m != nil {
		lk.m.add(context.Background(), lk.m.held, &lk.m.heldAttrs[modeIndex(l.dl.Mode)], l.dl.Key, 1)
	}
	msg := "dlock: lease granted"
	if op == "resume" {
		msg = "dlock: lease resumed"
	}
	lk.logLease(slog.LevelDebug, msg, l, "", nil)
}

// monoBase is the origin of Lease.grantedAt: a Duration since it is a
// third of a time.Time's size, which keeps a Lease in its size class.
var monoBase = time.Now()

// ended records the end of l with err, a lease counted by granted at
// grantedAt (zero when metrics were off then). A lost lease is logged by
// lost.
func (lk *Locker) ended(l *Lease, err error, grantedAt time.Duration) {
	e := endOf(err)
	if lk.m != nil {
		ctx, mode := context.Background(), modeIndex(l.dl.Mode)
		if grantedAt != 0 {
			lk.m.record(ctx, lk.m.hold, &lk.m.holdAttrs[mode][e], l.dl.Key, (time.Since(monoBase) - grantedAt).Seconds())
		}
		lk.m.add(ctx, lk.m.held, &lk.m.heldAttrs[mode], l.dl.Key, -1)
	}
	switch e {
	case endUnlocked:
		lk.logLease(slog.LevelDebug, "dlock: lease released", l, "", nil)
	case endClosed:
		lk.logLease(slog.LevelDebug, "dlock: lease closed", l, "", nil)
	case endDetached:
		lk.logLease(slog.LevelDebug, "dlock: lease detached", l, "", nil)
	}
}

// lost counts and logs the loss of l, for cause (lostExpired, ...).
func (lk *Locker) lost(l *Lease, cause int, err error) {
	if lk.m != nil {
		lk.m.add(context.Background(), lk.m.lost, &lk.m.lostAttrs[modeIndex(l.dl.Mode)][cause], l.dl.Key, 1)
	}
	lk.logLease(slog.LevelWarn, "dlock: lease lost", l, lostNames[cause], err)
}

// renewalFailed counts a failed renewal of l.
func (lk *Locker) renewalFailed(l *Lease) {
	if lk.m != nil {
		lk.m.add(context.Background(), lk.m.renewFailed, &lk.m.renewAttrs[modeIndex(l.dl.Mode)], l.dl.Key, 1)
	}
}

// renewalsLate counts the renewals of ls as late.
func (lk *Locker) renewalsLate(ls []*Lease) {
	if lk.m == nil {
		return
	}
	for _, l := range ls {
		lk.m.add(context.Background(), lk.m.renewLate, &lk.m.renewAttrs[modeIndex(l.dl.Mode)], l.dl.Key, 1)
	}
}

// logLate warns that late renewals came late since the last warning; the
// Locker holds held leases, queued of whose renewals wait for a worker.
func (lk *Locker) logLate(late, held, queued int) {
	lg := lk.opts.Logger
	if lg == nil || !lg.Enabled(context.Background(), slog.LevelWarn) {
		return
	}
	lg.LogAttrs(context.Background(), slog.LevelWarn, "dlock: renewals falling behind: leases will be lost if this goes on",
		slog.String("driver", lk.name), slog.Int("late", late), slog.Int("held", held), slog.Int("queued", queued))
}

// releaseFailed counts a failed release of dl: an Unlock's, or a
// background one that gave up.
func (lk *Locker) releaseFailed(dl *driver.Lease, background bool) {
	if lk.m != nil {
		lk.m.add(context.Background(), lk.m.releaseFailed, &lk.m.releaseAttrs[modeIndex(dl.Mode)][boolIndex(background)], dl.Key, 1)
	}
}

// logLease logs an event of l's life at level, with its key, driver, mode
// and token (and limit, for a permit), then cause and err when given.
// Nothing is built when the logger would drop the record.
func (lk *Locker) logLease(level slog.Level, msg string, l *Lease, cause string, err error) {
	lg := lk.opts.Logger
	if lg == nil || !lg.Enabled(context.Background(), level) {
		return
	}
	var a [7]slog.Attr
	n := copy(a[:], []slog.Attr{
		slog.String("key", l.dl.Key),
		slog.String("driver", lk.name),
		slog.String("mode", l.dl.Mode.String()),
		slog.Uint64("token", l.dl.Token),
	})
	if l.dl.Mode == driver.Permit {
		a[n] = slog.Int("limit", l.dl.Limit)
		n++
	}
	if cause != "" {
		a[n] = slog.String("cause", cause)
		n++
	}
	if err != nil {
		a[n] = slog.Any("err", err)
		n++
	}
	lg.LogAttrs(context.Background(), level, msg, a[:n]...)
}
