package nemesis

import "testing"

// TestDisarmSlot: the faults a child armed end when its slot's next
// process is spawned (a child killed with a delay armed never disarms
// it), and only that slot's.
func TestDisarmSlot(t *testing.T) {
	stopped := map[string]int{}
	p := &ParentRPC{arms: map[int]armed{
		1: {"C1", func() { stopped["C1"]++ }},
		2: {"C2", func() { stopped["C2"]++ }},
		3: {"C1", func() { stopped["C1"]++ }},
	}}
	p.disarmSlot("C1")
	if stopped["C1"] != 2 || stopped["C2"] != 0 {
		t.Fatalf("stopped %v, want C1's two arms only", stopped)
	}
	if len(p.arms) != 1 {
		t.Fatalf("arms left %v, want C2's", p.arms)
	}
	var ok bool
	if err := p.Disarm(1, &ok); err != nil || stopped["C1"] != 2 {
		t.Fatalf("a later Disarm of a disarmed fault: err %v, stopped %v", err, stopped)
	}
}
