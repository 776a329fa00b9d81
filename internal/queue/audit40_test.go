package queue_test

import (
	"slices"
	"testing"

	"github.com/dlock-go/dlock/internal/queue"
)

// queues calls f with every queue of up to n entries over kinds.
func queues(n int, kinds []queue.Entry, f func([]queue.Entry)) {
	var rec func(q []queue.Entry)
	rec = func(q []queue.Entry) {
		f(q)
		if len(q) == n {
			return
		}
		for _, k := range kinds {
			rec(append(slices.Clip(q), k))
		}
	}
	rec(nil)
}

func without(q []queue.Entry, mask int) ([]queue.Entry, map[int]int) {
	var out []queue.Entry
	pos := map[int]int{}
	for i, e := range q {
		if mask&(1<<i) == 0 {
			pos[i] = len(out)
			out = append(out, e)
		}
	}
	return out, pos
}

// TestAudit40WatchSound checks, for every queue of up to 7 entries (one
// limit per queue, and two limits too), that a waiter stays waiting
// whatever set of entries leaves as long as its watched entries all stay
// (no waiter stuck while the rule grants it), and that each entry a
// departure hands the key to watches that departure.
func TestAudit40WatchSound(t *testing.T) {
	x := queue.Entry{}
	s := queue.Entry{Kind: queue.Shared}
	p := func(n int) queue.Entry { return queue.Entry{Kind: queue.Permit, Limit: n} }
	herd, handed := 0, 0
	for _, kinds := range [][]queue.Entry{{x, s, p(1)}, {x, s, p(2)}, {x, s, p(3)}, {x, p(2), p(3)}, {s, p(1), p(2)}} {
		queues(7, kinds, func(q []queue.Entry) {
			for j := range q {
				w := queue.Watch(q, j)
				if queue.Granted(q, j) {
					if w != nil {
						t.Fatalf("%v: granted %d watches %v", q, j, w)
					}
					continue
				}
				if len(w) == 0 {
					t.Fatalf("%v: waiter %d watches nothing", q, j)
				}
				keep := 0
				for _, i := range w {
					if i >= j {
						t.Fatalf("%v: waiter %d watches %d", q, j, i)
					}
					keep |= 1 << i
				}
				keep |= 1 << j
				for mask := 0; mask < 1<<len(q); mask++ {
					if mask&keep != 0 {
						continue
					}
					after, pos := without(q, mask)
					if queue.Granted(after, pos[j]) {
						t.Fatalf("%v: waiter %d watches %v, yet the departure of %b grants it", q, j, w, mask)
					}
				}
			}
			for i := range q {
				h := queue.HandOver(q, i)
				for _, j := range h {
					if !slices.Contains(queue.Watch(q, j), i) {
						t.Fatalf("%v: departure of %d grants %d, which watches %v", q, i, j, queue.Watch(q, j))
					}
				}
				for j := range q {
					if slices.Contains(queue.Watch(q, j), i) {
						herd++
					}
				}
				handed += len(h)
			}
		})
	}
	t.Logf("wake-ups %d for %d hand-overs", herd, handed)
}
