package nemesis

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver/memory"
	"github.com/dlock-go/dlock/lock"
)

// caughtSet is, per detector (detectors), the variants and controls that
// made it report a violation, and the variants run.
type caughtSet struct {
	mu  sync.Mutex
	by  map[string][]string
	ran map[string]bool // variants run, by name
}

func newCaughtSet() *caughtSet {
	return &caughtSet{by: map[string][]string{}, ran: map[string]bool{}}
}

func (c *caughtSet) add(detector, by string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !slices.Contains(c.by[detector], by) {
		c.by[detector] = append(c.by[detector], by)
	}
}

// report prints "teeth: DETECTOR caught by VARIANT" for each detector
// that something made report a violation, in the list's order, and fails
// for each that nothing did, unless none of its variants ran (a -run
// that selects others): the run was not meant to show it, and it says so.
func (c *caughtSet) report(t *testing.T) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, d := range detectors() {
		by := c.by[d]
		sort.Strings(by)
		if len(by) > 0 {
			say("teeth: %s caught by %s", d, strings.Join(by, ", "))
			continue
		}
		var own, ran []string
		for _, v := range variants {
			if v.detector() == d {
				own = append(own, v.name)
				if c.ran[v.name] {
					ran = append(ran, v.name)
				}
			}
		}
		switch {
		case len(own) == 0:
			t.Errorf("teeth: detector %s has no broken variant (give it one in variants_test.go that only it catches)", d)
		case len(ran) > 0:
			t.Errorf("teeth: detector %s reported nothing, though its variants %s ran: it may be switched off", d, strings.Join(ran, ", "))
		default:
			t.Logf("teeth: %s not shown: its variants (%s) were not selected", d, strings.Join(own, ", "))
		}
	}
}

// detector is the detector the variant must make report.
func (v variant) detector() string { return Violation{Kind: v.kind, Check: v.check}.Detector() }

// runVariant runs a broken variant and fails unless the checker reported
// the kind of violation it commits. Some variants commit it only on
// calls a busy machine makes few of in a second or two (a Resume, a full
// semaphore): a run that found none is tried again, twice at most, each
// time twice as long, before the detector is called silent.
func runVariant(t *testing.T, v variant, s uint64, caught *caughtSet) {
	caught.mu.Lock()
	caught.ran[v.name] = true
	caught.mu.Unlock()
	d := v.duration
	if d == 0 {
		d = 1500 * time.Millisecond
	}
	for try := range 3 {
		others, sum, cfg, got := runVariantOnce(t, v, s+uint64(try), d)
		if got {
			caught.add(v.detector(), v.name)
			if len(others) > 0 {
				t.Logf("variant %s: besides %s, found %s", v.name, v.detector(), tally(others, ": "))
			}
			return
		}
		if try < 2 {
			t.Logf("variant %s: no %s in %v (seed %d): trying again, for %v\n%s\n%s", v.name, v.detector(), d, s+uint64(try), 2*d, sum.Line(), sum.Details())
		}
		if try == 2 {
			t.Errorf("variant %s (%s): no %s reported in three runs (the last for %v): its detector stays silent (replay: %s)\n%s\n%s", v.name, v.breaks, v.detector(), d, cfg.Replay, sum.Line(), sum.Details())
		}
		d *= 2
	}
}

// runVariantOnce runs v once for d, and says whether its detector
// reported it, and how many violations of other detectors than it, of
// kinds it may not commit, were found.
func runVariantOnce(t *testing.T, v variant, s uint64, d time.Duration) (map[string]int, Summary, Config, bool) {
	tg, undo := v.setup()
	tg.skipOnce = v.detector() != "residue/once" // it waits for the backend
	cfg := Config{
		Target: tg, Seed: s, Duration: d, Lockers: 2, Workers: 6, Keys: 3, NoFaults: len(v.faults) == 0, Faults: v.faults,
		Replay: fmt.Sprintf("NEMESIS_SEED=%d go test -count=1 -run 'TestTeeth/(together/)?%s$' ./nemesis/", s, v.name), Logf: quiet(t, 2),
	}
	if v.fullLoad {
		cfg.Lockers, cfg.Workers, cfg.Keys = 0, 0, 0
	}
	var sum Summary
	if v.leaks {
		sum = runOne(t, cfg)
	} else {
		sum = Run(t, cfg)
	}
	if undo != nil {
		undo()
	}
	got := false
	others := map[string]int{}
	for _, x := range sum.Violations {
		if x.Detector() == v.detector() {
			got = true
		} else if !slices.Contains(v.also, x.Kind) {
			others[x.Detector()]++
		}
	}
	return others, sum, cfg, got
}

// TestUnexercised: a run of a target that declares Shared and Permits
// over a memory Locker that hides its shared leases fails its exercise check
// (its workers ask for no shared lease), and the same target over the
// memory Locker itself passes it.
func TestUnexercised(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the nemesis")
	}
	hidden := variantTarget("rw-hidden", "", onMemory(func(inner Locker, _ *memory.Store) Locker {
		return semOnly{inner}
	}))
	honest := variantTarget("honest", "", nil)
	honest.Reentry = true
	for _, c := range []struct {
		tg   *Target
		want []string
	}{
		{hidden, []string{"var-rw-hidden declares Shared, but its Locker has no shared leases: none was asked for"}},
		{honest, nil},
	} {
		cfg := Config{Target: c.tg, Seed: seed(t), Duration: 2 * time.Second, Lockers: 2, Workers: 6, Keys: 3, NoFaults: true, Logf: quiet(t, 2)}
		sum := Run(t, cfg)
		if got := sum.Unexercised(c.tg); strings.Join(got, "\n") != strings.Join(c.want, "\n") {
			t.Errorf("%s: Unexercised says %q, want %q\n%s", c.tg.Name, got, c.want, sum.Details())
		}
	}
}

// semOnly is a memory Locker that hides its shared leases.
type semOnly struct{ Locker }

func (s semOnly) Supports(c lock.Capability) error {
	if c == lock.SharedLeases {
		return errHidden
	}
	return s.Locker.Supports(c)
}
