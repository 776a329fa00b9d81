package nemesis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/driver/memory"
	"github.com/dlock-go/dlock/lock"
)

// A variant is a broken lock, on the memory driver, that commits one kind
// of violation, and nothing else where it can: TestTeeth runs each and
// fails if the checker does not report it through the variant's
// detector. Between them they cover detectors: a kind that several
// detectors report has a variant that only each of them catches.
type variant struct {
	name, kind string
	// check, for a kind of kindChecks, is the detector's check.
	check string
	// also are the kinds the variant cannot help committing too.
	also []string
	// breaks says what is broken.
	breaks string
	// setup makes the variant's target; undo, if not nil, is called after
	// its run.
	setup func() (tg *Target, undo func())
	// faults, if set, are the only faults injected; none otherwise.
	faults []string
	// duration of the run (default 1.5s).
	duration time.Duration
	// leaks: run it alone, with the goroutine-leak check.
	leaks bool
	// fullLoad: the run's default load (3 Lockers of 8 workers on 4
	// keys), not the lighter one of the other variants.
	fullLoad bool
}

// variantTarget is a target over the memory Store whose Lockers open
// returns, with short leases so that expiries come soon.
func variantTarget(name, breaks string, open func(store *memory.Store, o lock.Options) Locker) *Target {
	return &Target{
		Name: "var-" + name, Broken: breaks, Shared: true, Permits: true, TTL: time.Second,
		LockTTLs: ms(300*time.Millisecond, 600*time.Millisecond), RefreshTTLs: ms(100*time.Millisecond, 300*time.Millisecond, 600*time.Millisecond),
		Bound: time.Second, Recovery: time.Second, ReleaseTimeout: time.Second,
		memory: open,
	}
}

// onMemory wraps each memory Locker of a target in what wrap returns.
func onMemory(wrap func(inner Locker, store *memory.Store) Locker) func(*memory.Store, lock.Options) Locker {
	return func(store *memory.Store, o lock.Options) Locker {
		return wrap(memory.New(store, &o), store)
	}
}

// simple makes a variant's setup from a target alone.
func simple(name, breaks string, open func(*memory.Store, lock.Options) Locker, view func(string, *lock.Lease) leaseView, do doFunc) func() (*Target, func()) {
	return func() (*Target, func()) {
		tg := variantTarget(name, breaks, open)
		tg.view, tg.do = view, do
		return tg, nil
	}
}

// viewing is a view maker: each lease with the view make returns.
func viewing(make func(l *lock.Lease) *brokenLease) func(string, *lock.Lease) leaseView {
	return func(_ string, l *lock.Lease) leaseView { return make(l) }
}

// every n-th call of a counter.
func nth(c *atomic.Int64, n int64) bool { return c.Add(1)%n == 0 }

var variants = []variant{
	{name: "overbook", kind: "over-limit", duration: 4 * time.Second, fullLoad: true, breaks: "a permit of a full semaphore is granted",
		setup: func() (*Target, func()) { return TargetByName(overbookName), nil }},
	{name: "steal-held", kind: "overlap", breaks: "an exclusive TryLock of a held key forgets the key's grants and takes it",
		setup: func() (*Target, func()) {
			tg := variantTarget("steal-held", "", onMemory(func(inner Locker, store *memory.Store) Locker {
				return &stealLocker{Locker: inner, store: store}
			}))
			tg.Permits = false // the forgotten permits would be over the limit too
			return tg, nil
		}},
	// Readers do not write: only the order of grants shows it.
	{name: "token-back", kind: "token-order", check: "grants", breaks: "every second shared grant reports token 1",
		setup: func() (*Target, func()) {
			var n atomic.Int64
			return variantTarget("token-back", "", func(store *memory.Store, o lock.Options) Locker {
				return newVia(store, o, func(d *viaLocker) {
					d.granted = func(l *driver.Lease) {
						if l.Mode == driver.Shared && nth(&n, 2) {
							l.Token = 1
						}
					}
				})
			}), nil
		}},
	// A resumed lease is not a grant: only the resource's refusal of its
	// write shows its token went back.
	{name: "resume-token-down", kind: "token-order", check: "write", also: []string{"resume-mismatch"},
		breaks: "Resume reports a token one below the detached lease's", duration: 3 * time.Second,
		setup: func() (*Target, func()) {
			return variantTarget("resume-token-down", "", func(store *memory.Store, o lock.Options) Locker {
				return newVia(store, o, func(d *viaLocker) {
					d.resumable = true
					d.resumed = func(l *driver.Lease) { l.Token-- }
				})
			}), nil
		}},
	{name: "token-stuck", kind: "stale-write", also: []string{"token-order"}, faults: []string{"stall"}, duration: 3 * time.Second,
		breaks: "every exclusive grant reports token 1, leases are not renewed, and holders stall before a write",
		setup: func() (*Target, func()) {
			return variantTarget("token-stuck", "", func(store *memory.Store, o lock.Options) Locker {
				return noRenew(newVia(store, o, func(d *viaLocker) {
					d.granted = func(l *driver.Lease) {
						if l.Mode == driver.Exclusive {
							l.Token = 1
						}
					}
				}))
			}), nil
		}},
	{name: "limit-off", kind: "limit-mismatch", breaks: "a permit's lease reports a limit one above the one asked for",
		setup: func() (*Target, func()) {
			return variantTarget("limit-off", "", func(store *memory.Store, o lock.Options) Locker {
				return newVia(store, o, func(d *viaLocker) {
					d.granted = func(l *driver.Lease) {
						if l.Mode == driver.Permit {
							l.Limit++
						}
					}
				})
			}), nil
		}},
	{name: "resume-token", kind: "resume-mismatch", breaks: "Resume reports a token one above the detached lease's",
		setup: func() (*Target, func()) {
			return variantTarget("resume-token", "", func(store *memory.Store, o lock.Options) Locker {
				return newVia(store, o, func(d *viaLocker) {
					d.resumable = true
					d.resumed = func(l *driver.Lease) { l.Token++ }
				})
			}), nil
		}},
	{name: "note-dropped", kind: "note-mismatch", breaks: "Inspect shows every other grant's note as none, as a driver that drops notes on one path",
		setup: simple("note-dropped", "", onMemory(func(inner Locker, _ *memory.Store) Locker {
			return &noteDropper{Locker: inner}
		}), nil, nil)},
	{name: "probe-refused", kind: "liveness", check: "probe", breaks: "Lock of a liveness probe's free key is turned down",
		setup: simple("probe-refused", "", onMemory(func(inner Locker, _ *memory.Store) Locker {
			return &brokenLocker{Locker: inner, lockFn: func(ctx context.Context, key string, opts ...lock.Option) (*lock.Lease, error) {
				if strings.HasPrefix(key, "probe/") {
					return nil, refused(key)
				}
				return inner.Lock(ctx, key, opts...)
			}}
		}), nil, nil)},
	{name: "probe-left", kind: "residue", check: "end", breaks: "the release of a liveness probe's grant leaves it on the Store",
		setup: func() (*Target, func()) {
			tg := variantTarget("probe-left", "", func(store *memory.Store, o lock.Options) Locker {
				return newVia(store, o, func(d *viaLocker) {
					d.release = func(l *driver.Lease, in *lock.Lease) (bool, error) {
						if !strings.HasPrefix(l.Key, "probe/") {
							return false, nil
						}
						_, err := in.Detach() // the grant stays until its TTL
						return true, driverError(err)
					}
				})
			})
			tg.TTL = 10 * time.Second // the probes' TTL: their grants outlive the run
			return tg, nil
		}},
	{name: "witness-wait-refused", kind: "liveness", check: "witness", faults: []string{"witness"}, duration: 3 * time.Second,
		breaks: "a Lock of a witness's held key fails at once instead of waiting",
		setup: simple("witness-wait-refused", "", onMemory(func(inner Locker, _ *memory.Store) Locker {
			return &brokenLocker{Locker: inner, lockFn: func(ctx context.Context, key string, opts ...lock.Option) (*lock.Lease, error) {
				if !strings.HasPrefix(key, "witness/") {
					return inner.Lock(ctx, key, opts...)
				}
				l, err := inner.TryLock(ctx, key, opts...)
				if errors.Is(err, lock.ErrHeld) {
					return nil, refused(key)
				}
				return l, err
			}}
		}), nil, nil)},
	{name: "witness-unrenewed", kind: "held-lost", faults: []string{"witness"}, duration: 3 * time.Second,
		breaks: "a witness's lease lasts 400ms and is not renewed",
		setup: simple("witness-unrenewed", "", onMemory(func(inner Locker, _ *memory.Store) Locker {
			return &brokenLocker{Locker: inner, lockFn: func(ctx context.Context, key string, opts ...lock.Option) (*lock.Lease, error) {
				if strings.HasPrefix(key, "witness/") {
					opts = append(opts, lock.WithTTL(400*time.Millisecond), lock.WithDisableAutoRenew(true))
				}
				return inner.Lock(ctx, key, opts...)
			}}
		}), nil, nil)},
	{name: "once-left", kind: "residue", check: "once", breaks: "a key used once is released by detaching its lease, a minute long",
		setup: func() (*Target, func()) {
			return variantTarget("once-left", "", func(store *memory.Store, o lock.Options) Locker {
				via := newVia(store, o, func(d *viaLocker) {
					d.release = func(l *driver.Lease, in *lock.Lease) (bool, error) {
						if !strings.HasPrefix(l.Key, "once/") {
							return false, nil
						}
						_, err := in.Detach() // the grant stays until its TTL
						return true, driverError(err)
					}
				})
				return &brokenLocker{Locker: via, lockFn: func(ctx context.Context, key string, opts ...lock.Option) (*lock.Lease, error) {
					if strings.HasPrefix(key, "once/") {
						opts = append(opts, lock.WithTTL(time.Minute))
					}
					return via.Lock(ctx, key, opts...)
				}}
			}), nil
		}},
	{name: "hot-lock-refused", kind: "no-regrant", breaks: "a blocking Lock of a hot key is turned down",
		setup: simple("hot-lock-refused", "", onMemory(func(inner Locker, _ *memory.Store) Locker {
			return &brokenLocker{Locker: inner, lockFn: func(ctx context.Context, key string, opts ...lock.Option) (*lock.Lease, error) {
				if strings.HasPrefix(key, "hot/") {
					return nil, refused(key)
				}
				return inner.Lock(ctx, key, opts...)
			}}
		}), nil, nil)},
	{name: "trylock-late", kind: "late-return", check: "call", breaks: "every third TryLock returns 600ms after its context ended",
		setup: func() (*Target, func()) {
			var n atomic.Int64
			return simple("trylock-late", "", onMemory(func(inner Locker, _ *memory.Store) Locker {
				return &brokenLocker{Locker: inner, tryLock: func(ctx context.Context, key string, opts ...lock.Option) (*lock.Lease, error) {
					if !nth(&n, 3) {
						return inner.TryLock(ctx, key, opts...)
					}
					<-ctx.Done()
					time.Sleep(3 * CallSlack)
					return nil, fmt.Errorf("%w: %w", lock.ErrNotAcquired, ctx.Err())
				}}
			}), nil, nil)()
		}},
	{name: "leader-done-late", kind: "term", also: []string{"done-late", "closed-open", "unlock-open"}, duration: 3 * time.Second,
		breaks: "a lost term's Done closes 400ms late: the next leader is elected while the last still leads",
		setup:  func() (*Target, func()) { return TargetByName(leaderLateName), nil }},
	{name: "notes-dropped", kind: "term", breaks: "a driver that says it stores notes keeps none: observers see leaders without announcements",
		setup: func() (*Target, func()) {
			return variantTarget("notes-dropped", "", func(store *memory.Store, o lock.Options) Locker {
				return newVia(store, o, func(d *viaLocker) { d.notesClaimed = true })
			}), nil
		}},
	{name: "done-late-lost", kind: "done-late", check: "lease", breaks: "a lost lease's Done closes 400ms after its deadline",
		duration: 2500 * time.Millisecond,
		setup: simple("done-late-lost", "", unrenewed, viewing(func(l *lock.Lease) *brokenLease {
			return &brokenLease{Lease: l, late: delayedDone(l, 400*time.Millisecond, isLost)}
		}), nil)},
	{name: "late-grant", kind: "done-late", check: "grant", breaks: "TryLock returns a lease 400ms past its deadline, its Done still open",
		setup: lateGrant},
	{name: "refresh-ends", kind: "refresh-not-held", breaks: "Refresh releases the lease and returns nil",
		setup: simple("refresh-ends", "", nil, viewing(func(l *lock.Lease) *brokenLease {
			return &brokenLease{Lease: l, refreshFn: func(ctx context.Context, _ time.Duration) error {
				l.Unlock(ctx)
				return nil
			}}
		}), nil)},
	{name: "unlock-async", kind: "unlock-open", breaks: "Unlock returns at once, and releases the lease 300ms later",
		setup: simple("unlock-async", "", nil, viewing(func(l *lock.Lease) *brokenLease {
			return &brokenLease{Lease: l, unlockFn: func(context.Context) error {
				unlockSoon(l, 300*time.Millisecond)
				return nil
			}}
		}), nil)},
	{name: "detach-open", kind: "detach-open", breaks: "a detached lease's Done closes 300ms after Detach returned",
		setup: simple("detach-open", "", nil, viewing(func(l *lock.Lease) *brokenLease {
			return &brokenLease{Lease: l, late: delayedDone(l, 300*time.Millisecond, isDetached)}
		}), nil)},
	{name: "detach-ends", kind: "detach-refused-ended", breaks: "Detach releases the lease and says the driver cannot resume",
		setup: simple("detach-ends", "", nil, viewing(func(l *lock.Lease) *brokenLease {
			return &brokenLease{Lease: l, detachFn: func() (string, error) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				l.Unlock(ctx)
				return "", fmt.Errorf("%w: this variant cannot resume", lock.ErrInvalid)
			}}
		}), nil)},
	{name: "err-nil", kind: "err-nil", breaks: "Err returns nil after Done closed (but for a detached lease)",
		setup: simple("err-nil", "", nil, viewing(func(l *lock.Lease) *brokenLease {
			return &brokenLease{Lease: l, errFn: func() error {
				if err := l.Err(); isDetached(err) {
					return err
				}
				return nil
			}}
		}), nil)},
	{name: "do-unlock-late", kind: "do-open", breaks: "lock.Do returns before its lease is released",
		setup: simple("do-unlock-late", "", nil, nil, doUnlockLate)},
	{name: "do-keep-ctx", kind: "do-ctx", breaks: "lock.Do's fn context outlives the lease",
		setup: simple("do-keep-ctx", "", nil, nil, doKeepCtx)},
	{name: "do-swallow", kind: "do-panic", breaks: "lock.Do returns an error when fn panics",
		setup: simple("do-swallow", "", nil, nil, doSwallow)},
	{name: "close-early", kind: "closed-open", check: "close", faults: []string{"churn"}, duration: 2500 * time.Millisecond,
		breaks: "Close returns at once, and closes the Locker 300ms later",
		setup: simple("close-early", "", onMemory(func(inner Locker, _ *memory.Store) Locker {
			return &brokenLocker{Locker: inner, closeFn: func() error { go closeAfter(inner, 300*time.Millisecond); return nil }}
		}), nil, nil)},
	{name: "close-slow", kind: "late-return", check: "close", faults: []string{"churn"}, duration: 2500 * time.Millisecond,
		breaks: "Close closes the Locker only 600ms past its ReleaseTimeout",
		setup: simple("close-slow", "", onMemory(func(inner Locker, _ *memory.Store) Locker {
			return &brokenLocker{Locker: inner, closeFn: func() error { time.Sleep(time.Second + 3*CallSlack); return inner.Close() }}
		}), nil, nil)},
	{name: "lock-after-close", kind: "closed-open", check: "after-close", faults: []string{"churn"}, duration: 2500 * time.Millisecond,
		breaks: "a TryLock that finds its Locker closed takes the key through another Locker",
		setup:  simple("lock-after-close", "", lockAfterClose, nil, nil)},
	{name: "done-never", kind: "not-ended", also: []string{"done-late", "closed-open"},
		// Holders unlock their leases or leave them to expire: a lease
		// that is never seen ended has a Done that stays open past its
		// deadline, and after Close.
		breaks:   "a lost lease's Done closes only 10s after its deadline",
		duration: 2500 * time.Millisecond,
		setup: simple("done-never", "", unrenewed, viewing(func(l *lock.Lease) *brokenLease {
			return &brokenLease{Lease: l, late: delayedDone(l, 10*time.Second, isLost)}
		}), nil)},
	{name: "invalid-refusal", kind: "unexpected-error", breaks: "every fifth TryLock of a valid key fails with ErrInvalid",
		setup: func() (*Target, func()) {
			var n atomic.Int64
			return simple("invalid-refusal", "", onMemory(func(inner Locker, _ *memory.Store) Locker {
				return &brokenLocker{Locker: inner, tryLock: func(ctx context.Context, key string, opts ...lock.Option) (*lock.Lease, error) {
					if nth(&n, 5) {
						return nil, fmt.Errorf("%w: key %q turned down by a broken variant", lock.ErrInvalid, key)
					}
					return inner.TryLock(ctx, key, opts...)
				}}
			}), nil, nil)()
		}},
	{name: "goroutine-left", kind: "goroutine-leak", leaks: true, breaks: "each Locker starts a goroutine that Close does not stop",
		setup: goroutineLeft},
}

// lockAfterClose opens the lock-after-close variant's Lockers: a TryLock
// (which first waits 100ms, so that some are under way when Close
// returns) refused for a closed Locker takes the key through a spare one,
// whose unrenewed leases expire by themselves. The workers' TryLocks
// show it only when one is under way at Close and finds its key free;
// the TryLock of a key of its own after every Close (tryClosed) always
// does.
func lockAfterClose(store *memory.Store, o lock.Options) Locker {
	inner := memory.New(store, &o)
	spare := memory.New(store, &o)
	return &brokenLocker{Locker: inner,
		tryLock: func(ctx context.Context, key string, opts ...lock.Option) (*lock.Lease, error) {
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("%w: %w", lock.ErrNotAcquired, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
			l, err := inner.TryLock(ctx, key, opts...)
			if errors.Is(err, lock.ErrClosed) {
				return spare.TryLock(ctx, key, append(opts, lock.WithDisableAutoRenew(true))...) // the bug
			}
			return l, err
		},
		closeFn: func() error {
			err := inner.Close()
			time.AfterFunc(5*time.Second, func() { spare.Close() })
			return err
		},
	}
}

// goroutineLeft is the goroutine-left variant; its goroutines end when
// undo is called, after the leak check.
func goroutineLeft() (*Target, func()) {
	stop := make(chan struct{})
	tg, _ := simple("goroutine-left", "", onMemory(func(inner Locker, _ *memory.Store) Locker {
		go func() { <-stop }() // the bug
		return inner
	}), nil, nil)()
	return tg, func() { close(stop) }
}

func closeAfter(lk Locker, d time.Duration) {
	time.Sleep(d)
	lk.Close()
}

// noteDropper is a memory Locker whose Inspect shows the notes of every
// other call's holders as none.
type noteDropper struct {
	Locker
	calls atomic.Int64
}

func (d *noteDropper) Inspect(ctx context.Context, key string) (*lock.KeyState, error) {
	st, err := d.Locker.Inspect(ctx, key)
	if err == nil && nth(&d.calls, 2) {
		for i := range st.Holders {
			st.Holders[i].Note = "" // the bug
		}
	}
	return st, err
}

// stealLocker is a memory Locker without permits whose exclusive TryLock
// of a held key deletes the key's grants behind their holders' backs and
// takes it.
type stealLocker struct {
	Locker
	store *memory.Store
}

func (s *stealLocker) Supports(c lock.Capability) error {
	if c == lock.Permits {
		return errHidden
	}
	return s.Locker.Supports(c)
}

// errHidden is the refusal of a capability a wrapper hides.
var errHidden = fmt.Errorf("%w: hidden by the wrapper", lock.ErrUnsupported)

func (s *stealLocker) TryLock(ctx context.Context, key string, opts ...lock.Option) (*lock.Lease, error) {
	l, err := s.Locker.TryLock(ctx, key, opts...)
	if errors.Is(err, lock.ErrHeld) {
		s.store.DeleteKey(key) // the bug
		l, err = s.Locker.TryLock(ctx, key, opts...)
	}
	return l, err
}

// unrenewed opens memory Lockers whose leases are not renewed (so that
// more of them are lost).
func unrenewed(store *memory.Store, o lock.Options) Locker {
	return noRenew(memory.New(store, &o))
}

// noRenew makes every lease of inner's Lock and TryLock unrenewed.
func noRenew(inner Locker) Locker {
	off := func(f func(context.Context, string, ...lock.Option) (*lock.Lease, error)) func(context.Context, string, ...lock.Option) (*lock.Lease, error) {
		return func(ctx context.Context, key string, opts ...lock.Option) (*lock.Lease, error) {
			return f(ctx, key, append(opts, lock.WithDisableAutoRenew(true))...)
		}
	}
	return &brokenLocker{Locker: inner, tryLock: off(inner.TryLock), lockFn: off(inner.Lock)}
}

// lateGrant is the late-grant variant: TryLock, when its context leaves
// it the time, holds an unrenewed lease until 400ms past its deadline
// before it returns it, and the lease's Done closes 600ms after it ended.
func lateGrant() (*Target, func()) {
	var late sync.Map // the leases returned late
	tg := variantTarget("late-grant", "", onMemory(func(inner Locker, _ *memory.Store) Locker {
		return &brokenLocker{Locker: inner, tryLock: func(ctx context.Context, key string, opts ...lock.Option) (*lock.Lease, error) {
			l, err := inner.TryLock(ctx, key, append(opts, lock.WithDisableAutoRenew(true))...)
			if err != nil {
				return l, err
			}
			if dl, ok := ctx.Deadline(); ok && time.Until(dl) > time.Until(l.Deadline())+700*time.Millisecond {
				late.Store(l, true)
				time.Sleep(time.Until(l.Deadline()) + 400*time.Millisecond)
			}
			return l, nil
		}}
	}))
	tg.view = func(_ string, l *lock.Lease) leaseView {
		if _, ok := late.Load(l); ok {
			return &brokenLease{Lease: l, late: delayedDone(l, 600*time.Millisecond, always)}
		}
		return l
	}
	return tg, nil
}
