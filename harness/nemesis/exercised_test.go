package nemesis

import (
	"slices"
	"testing"
	"time"
)

// A target that declares AllFaults fails the exercise check of a full run
// in which a kind of fault it may pick was never injected, and passes it
// in a shorter run, or one limited to some faults.
func TestUnexercisedFaults(t *testing.T) {
	tg := &Target{Name: "t", AllFaults: true}
	want := "t: no partition fault injected in 1m0s"
	base := Summary{Planned: time.Minute, FaultKinds: []string{"lost-reply", "partition"}, Injected: map[string]int{"lost-reply": 2}}
	base.Stats.Accepted, base.Stats.Probes = 1, 1
	base.Stats.Counts = map[string]int{"terms": 2, "set-by-key": 1}
	if got := base.Unexercised(tg); !slices.Equal(got, []string{want}) {
		t.Errorf("a full run without a partition: %q, want %q", got, want)
	}
	short := base
	short.Planned = 10 * time.Second
	limited := base
	limited.FaultsLimited = true
	all := base
	all.Injected = map[string]int{"lost-reply": 1, "partition": 1}
	for name, s := range map[string]Summary{"short": short, "limited": limited, "all injected": all} {
		if got := s.Unexercised(tg); len(got) > 0 {
			t.Errorf("%s: %q, want nothing", name, got)
		}
	}
	if got := base.Unexercised(&Target{Name: "t"}); len(got) > 0 {
		t.Errorf("a target without AllFaults: %q, want nothing", got)
	}
}
