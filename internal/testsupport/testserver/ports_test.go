package testserver

import "testing"

func TestFreeBusPorts(t *testing.T) {
	ports, err := freeBusPorts(5)
	must(t, err)
	seen := map[int]bool{}
	for _, p := range ports {
		if p > maxBusBasePort {
			t.Errorf("port %d: bus port %d out of range", p, p+10000)
		}
		if seen[p] || seen[p+10000] {
			t.Errorf("port %d overlaps", p)
		}
		seen[p], seen[p+10000] = true, true
	}
}
