package nemesis

import (
	"math/rand/v2"
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

// Once owed, the kinds of fault not injected yet come first, those that
// take the server before the others (whatever their weights), even with
// maxActive faults under way; a busy one is passed over for the next.
func TestInjectDue(t *testing.T) {
	for seed := range uint64(20) {
		var got []string
		kind := func(name string, w int, server, ok bool) fault {
			return fault{name: name, weight: w, server: server, inject: func() bool {
				if ok {
					got = append(got, name)
				}
				return ok
			}}
		}
		n := &nemesis{rng: rand.New(rand.NewPCG(seed, 7)), injected: map[string]int{"done": 1}}
		kinds := []fault{kind("client", 100, false, true), kind("busy", 3, true, false), kind("done", 100, true, true), kind("leader", 1, true, true)}
		if !n.injectDue(kinds, false) || !slices.Equal(got, []string{"leader"}) {
			t.Fatalf("seed %d: injected %q, want [leader]: a due server kind first, the busy one passed over", seed, got)
		}
		if n.injectDue(kinds, true) || len(got) != 1 {
			t.Fatalf("seed %d: with maxActive faults under way and no server kind to start, injected %q", seed, got)
		}
		if !n.injectDue(kinds, false) || !slices.Equal(got, []string{"leader", "client"}) {
			t.Fatalf("seed %d: injected %q, want [leader client]", seed, got)
		}
		if n.injectDue(kinds, false) {
			t.Fatalf("seed %d: nothing is due but busy, yet injectDue says it injected", seed)
		}
	}
}
