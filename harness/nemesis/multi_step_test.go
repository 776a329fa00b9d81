package nemesis

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/driver/memory"
	"github.com/dlock-go/dlock/lock"
)

// keepStep is viaLocker (a correct driver over a memory Locker) with a
// one-step path for sets (driver.SetAcquirer) that is not all or nothing:
// AcquireSet takes the keys one after the other, and when one is held it
// returns ErrHeld, keeping the keys it took before it, held and renewed
// (as a keep-alive left running would) for no holder. lock takes the
// refusal for a clean one (a held key leaves nothing behind, says
// SetAcquirer) and releases nothing; the sets it grants are
// MultiLease.Atomic. With honest set, it gives the keys back first: a
// correct driver, which the checker must not fault.
type keepStep struct {
	*viaLocker
	honest bool
}

var _ driver.SetAcquirer = (*keepStep)(nil)

func (d *keepStep) AcquireSet(ctx context.Context, ls []*driver.Lease) error {
	for i, l := range ls {
		err := d.Acquire(ctx, l)
		if err == nil {
			continue
		}
		for _, p := range ls[:i] {
			if d.honest {
				d.Release(context.WithoutCancel(ctx), p)
				continue
			}
			if in := d.held.get(p.Owner); in != nil { // the bug
				d.held.drop(p.Owner)
				go renewUntilEnd(in, p.TTL)
			}
		}
		return err
	}
	return nil
}

// renewUntilEnd refreshes l every third of ttl until a refresh fails (its
// Locker closed).
func renewUntilEnd(l *lock.Lease, ttl time.Duration) {
	for {
		time.Sleep(ttl / 3)
		ctx, cancel := context.WithTimeout(context.Background(), ttl)
		err := l.Refresh(ctx, ttl)
		cancel()
		if err != nil {
			return
		}
	}
}

// Inspect shows each grant under the owner of the outer lease it is (the
// grant of the held table whose inner lease has the holder's owner), so
// that the checker knows the holders that are leases of the run; a key
// kept by a refused set shows its inner owner, which no lease has.
func (d *keepStep) Inspect(ctx context.Context, key string) (driver.KeyState, error) {
	st, err := viaInspector{d.viaLocker}.Inspect(ctx, key)
	if err != nil {
		return st, err
	}
	outer := map[string]string{}
	d.held.mu.Lock()
	for o, in := range d.held.m {
		outer[grantOwner(in)] = o
	}
	d.held.mu.Unlock()
	for i, h := range st.Holders {
		if o, ok := outer[h.Owner]; ok {
			st.Holders[i].Owner = o
		}
	}
	return st, nil
}

// keepStepTarget is a target whose Lockers are over keepStep drivers.
func keepStepTarget(name string, honest bool) *Target {
	return variantTarget(name, "", func(store *memory.Store, o lock.Options) Locker {
		d := &keepStep{viaLocker: &viaLocker{inner: memory.New(store, &o), held: heldFor(store)}, honest: honest}
		return lock.New(d, &o)
	})
}

func init() {
	variants = append(variants, variant{name: "multi-keep-step", kind: "multi-partial", duration: 6 * time.Second,
		breaks: "a set taken in one step (driver.SetAcquirer) that finds a key held keeps the keys it took before it",
		setup:  func() (*Target, func()) { return keepStepTarget("multi-keep-step", false), nil }})
}

// The honest keepStep is a correct driver with a one-step path: a run on
// it finds no violation (multi-partial included: its Inspect shows the
// run's leases' owners), grants sets in one step, and passes the
// exercise check, which requires them of it.
func TestOneStepHonest(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the nemesis")
	}
	tg := keepStepTarget("step-honest", true)
	cfg := Config{Target: tg, Seed: seed(t), Duration: 4 * time.Second, Lockers: 2, Workers: 6, Keys: 3, NoFaults: true, Logf: quiet(t, 2)}
	sum := Run(t, cfg)
	if !sum.OneStepSets {
		t.Errorf("a driver with AcquireSet: OneStepSets false")
	}
	for _, v := range sum.Violations {
		t.Errorf("violation: %s", v.Text)
	}
	for _, p := range append(sum.Problems, sum.Unexercised(tg)...) {
		t.Errorf("%s", p)
	}
	if sum.Stats.Counts["set-atomic"] == 0 || sum.Stats.Counts["multi-leftover-read"] == 0 {
		t.Errorf("no set granted in one step, or no failed attempt's keys read:\n%s", sum.Details())
	}
}

// The exercise check requires sets granted in one step of a driver that
// takes them so, and key by key of the others.
func TestUnexercisedSets(t *testing.T) {
	tg := &Target{Name: "t"}
	var s Summary
	s.Stats.Accepted, s.Stats.Probes = 1, 1
	s.Stats.Counts = map[string]int{"terms": 2, "set-by-key": 3, "trylockmany": 5}
	if got := s.Unexercised(tg); len(got) > 0 {
		t.Errorf("key by key, no one-step path: %q, want nothing", got)
	}
	s.OneStepSets = true
	want := "t: no set granted in one step, though its driver is a driver.SetAcquirer (3 sets granted key by key, 5 attempts)"
	if got := s.Unexercised(tg); !slices.Equal(got, []string{want}) {
		t.Errorf("one-step path, key by key only: %q, want %q", got, want)
	}
	s.Stats.Counts = map[string]int{"terms": 2, "set-atomic": 1}
	if got := s.Unexercised(tg); len(got) > 0 {
		t.Errorf("one-step path, granted so: %q, want nothing", got)
	}
	s.OneStepSets = false
	want = "t: no set granted key by key (0 attempts)"
	if got := s.Unexercised(tg); !slices.Equal(got, []string{want}) {
		t.Errorf("no one-step path, no set granted: %q, want %q", got, want)
	}
}
