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

// caughtSet is, per kind of violation, the variants and controls that
// made the checker report it.
type caughtSet struct {
	mu  sync.Mutex
	by  map[string][]string
	ran int // variants run
}

func (c *caughtSet) add(kind, by string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !slices.Contains(c.by[kind], by) {
		c.by[kind] = append(c.by[kind], by)
	}
}

// report prints "teeth: KIND caught by VARIANT" for each kind of
// violationKinds that something made the checker report, in the list's
// order, and fails for each that nothing did.
func (c *caughtSet) report(t *testing.T) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, kind := range violationKinds {
		by := c.by[kind]
		sort.Strings(by)
		if len(by) == 0 && c.ran < len(variants) {
			t.Logf("teeth: %s not shown (not every variant ran)", kind)
			continue
		}
		if len(by) == 0 {
			t.Errorf("teeth: no broken variant made the checker report %s: its detector may be switched off (give it a variant in variants_test.go)", kind)
			continue
		}
		say("teeth: %s caught by %s", kind, strings.Join(by, ", "))
	}
}

// runVariant runs a broken variant and fails unless the checker reported
// the kind of violation it commits. Some variants commit it only on
// calls a busy machine makes few of in a second or two (a Resume, a full
// semaphore): a run that found none is tried again, twice at most, each
// time twice as long, before the detector is called silent.
func runVariant(t *testing.T, v variant, s uint64, caught *caughtSet) {
	caught.mu.Lock()
	caught.ran++
	caught.mu.Unlock()
	d := v.duration
	if d == 0 {
		d = 1500 * time.Millisecond
	}
	for try := range 3 {
		others, sum, cfg, got := runVariantOnce(t, v, s+uint64(try), d)
		if got {
			caught.add(v.kind, v.name)
			if len(others) > 0 {
				t.Logf("variant %s: besides %s, found %s", v.name, v.kind, tally(others, ": "))
			}
			return
		}
		if try == 2 {
			t.Errorf("variant %s (%s): no %s reported in three runs (the last for %v): its detector stays silent (replay: %s)\n%s\n%s", v.name, v.breaks, v.kind, d, cfg.Replay, sum.Line(), sum.Details())
		}
		d *= 2
	}
}

// runVariantOnce runs v once for d, and says whether its kind was found,
// and how many violations of other kinds than it may commit.
func runVariantOnce(t *testing.T, v variant, s uint64, d time.Duration) (map[string]int, Summary, Config, bool) {
	tg, undo := v.setup()
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
		if x.Kind == v.kind && (v.op == "" || (v.op == "lease") == (x.Op == "lease")) {
			got = true
		} else if !slices.Contains(v.also, x.Kind) {
			others[x.Kind]++
		}
	}
	return others, sum, cfg, got
}

// TestUnexercised: a run of a target that declares Shared and Permits
// over a memory Locker that hides lock.RWLocker fails its exercise check
// (its workers ask for no shared lease), and the same target over the
// memory Locker itself passes it.
func TestUnexercised(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the nemesis")
	}
	hidden := variantTarget("rw-hidden", "", onMemory(func(inner rwSem, _ *memory.Store) lock.Locker {
		return semOnly{inner}
	}))
	honest := variantTarget("honest", "", nil)
	honest.Reentry = true
	for _, c := range []struct {
		tg   *Target
		want []string
	}{
		{hidden, []string{"var-rw-hidden declares Shared, but its Locker is not a lock.RWLocker: no shared lease was asked for"}},
		{honest, nil},
	} {
		cfg := Config{Target: c.tg, Seed: seed(t), Duration: 2 * time.Second, Lockers: 2, Workers: 6, Keys: 3, NoFaults: true, Logf: quiet(t, 2)}
		sum := Run(t, cfg)
		if got := sum.Unexercised(c.tg); strings.Join(got, "\n") != strings.Join(c.want, "\n") {
			t.Errorf("%s: Unexercised says %q, want %q\n%s", c.tg.Name, got, c.want, sum.Details())
		}
	}
}

// semOnly is a memory Locker that is a lock.SemLocker and hides that it is
// a lock.RWLocker.
type semOnly struct{ lock.SemLocker }
