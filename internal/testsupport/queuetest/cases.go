package queuetest

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/dlock-go/dlock/internal/queue"
)

// Table is the table of cases, each with the holders the rule gives
// after every step, written by hand.
var Table = []Case{
	tcase("exclusive in arrival order", "+x +x +x -0 -1", "0|0|0|1|2"),
	tcase("readers share", "+s +s +s -1", "0|0 1|0 1 2|0 2"),
	tcase("reader waits behind a waiting writer", "+s +x +s ?s -0 -1", "0|0|0|0|1|2"),
	tcase("writer waits for every reader", "+s +s +x -0 -1", "0|0 1|0 1|1|2"),
	tcase("readers in a row follow a writer", "+x +s +s +x +s -0 -1 -2 -3", "0|0|0|0|0|1 2|2|3|4"),
	tcase("permits up to the limit", "+p2 +p2 +p2 +p2 -0 -1", "0|0 1|0 1|0 1|1 2|2 3"),
	tcase("permit waits behind a reader", "+s +p2 ?p2 -0", "0|0|0|1"),
	tcase("reader waits behind permits", "+p2 +s ?s -0", "0|0|0|1"),
	tcase("permit waits behind a waiting writer", "+p2 +x +p2 ?p2 -0 -1", "0|0|0|0|1|2"),
	tcase("permit with another limit is refused", "+p2 +p3 ?p3 +p2 +x ?p1 -0 -3 -4 +p3", "0|0|0|0 3|0 3|0 3|3|4||9"),
	tcase("one permit excludes", "+p1 +p1 ?p1 -0 ?p1", "0|0|0|1|1"),
	tcase("a waiter leaves", "+x +x +x -1 -0", "0|0|0|0|2"),
	tcase("try never queues", "?x ?x ?s -0 ?s ?s ?x ?p1 -4 -5 ?p1", "0|0|0||4|4 5|4 5|4 5|5||10"),
	tcase("a writer's leaving lets readers in", "+x +x +s +s -1 -0", "0|0|0|0|0|2 3"),
	tcase("writer behind a permit waiter", "+p1 +x +p1 -0 -1", "0|0|0|1|2"),
	tcase("a permit's nearer permit leaves, then the head", "+p2 +p2 +p2 +p2 -2 -0", "0|0 1|0 1|0 1|0 1|1 3"),
	tcase("a waiting permit's nearest leaves, then the head", "+p3 +p3 +p3 +p3 +p3 -3 -0 -1", "0|0 1|0 1 2|0 1 2|0 1 2|0 1 2|1 2 4|2 4"),
	tcase("a waiting writer leaves while readers hold", "+s +x +s +s -1", "0|0|0|0|0 2 3"),
	tcase("permits behind permits and a writer", "+p2 +p2 +x +p2 +p2 +p2 -2 -0 -1", "0|0 1|0 1|0 1|0 1|0 1|0 1|1 3|3 4"),
}

// tcase builds a Case from steps ("+x" joins an exclusive entry, "?s"
// tries a shared one, "+p2" joins a permit of 2, "-3" makes the entry of
// step 3 leave) and the holders after each step ("|" between steps).
func tcase(name, steps, holders string) Case {
	c := Case{Name: name}
	for _, f := range strings.Fields(steps) {
		var s Step
		switch f[0] {
		case '+':
			s.Op = Join
		case '?':
			s.Op = Try
		case '-':
			s.Op = Leave
			s.ID = mustAtoi(f[1:])
			c.Steps = append(c.Steps, s)
			continue
		default:
			panic("queuetest: bad step " + f)
		}
		switch f[1] {
		case 'x':
		case 's':
			s.Entry.Kind = queue.Shared
		case 'p':
			s.Entry = queue.Entry{Kind: queue.Permit, Limit: mustAtoi(f[2:])}
		default:
			panic("queuetest: bad step " + f)
		}
		c.Steps = append(c.Steps, s)
	}
	for _, h := range strings.Split(holders, "|") {
		var ids []int
		for _, f := range strings.Fields(h) {
			ids = append(ids, mustAtoi(f))
		}
		c.Want = append(c.Want, ids)
	}
	if len(c.Want) != len(c.Steps) {
		panic(fmt.Sprintf("queuetest: case %q: %d steps, %d holder lists", name, len(c.Steps), len(c.Want)))
	}
	return c
}

func mustAtoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		panic("queuetest: " + err.Error())
	}
	return n
}

// Random returns n random histories of steps steps each, made from seed
// (the same seed gives the same histories): joins, tries and leaves of
// every kind, at most maxLive live entries, permits mostly of the key's
// limit and now and then of another (refused).
func Random(seed uint64, n, steps int) []Case {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	out := make([]Case, n)
	for i := range out {
		out[i] = randomCase(r, fmt.Sprintf("random %d/%d", seed, i), steps)
	}
	return out
}

const maxLive = 7

func randomCase(r *rand.Rand, name string, steps int) Case {
	c := Case{Name: name}
	var m Model
	limit := 1 + r.IntN(3)
	for id := range steps {
		live := m.Live()
		var s Step
		switch {
		case len(live) > 0 && (len(live) >= maxLive || r.IntN(3) == 0):
			s = Step{Op: Leave, ID: live[r.IntN(len(live))]}
		case r.IntN(4) == 0:
			s.Op = Try
		}
		if s.Op != Leave {
			switch r.IntN(3) {
			case 1:
				s.Entry.Kind = queue.Shared
			case 2:
				s.Entry = queue.Entry{Kind: queue.Permit, Limit: limit}
				if r.IntN(8) == 0 {
					s.Entry.Limit = 1 + r.IntN(3)
				}
			}
			if len(live) == 0 && r.IntN(2) == 0 {
				limit = 1 + r.IntN(3)
			}
		}
		m.Apply(id, s)
		c.Steps = append(c.Steps, s)
	}
	return c
}

// WaiterConflicts reports whether a step of c brings a permit whose limit
// differs from a waiting permit's while the holders' agree (or none is a
// permit): a driver that checks the limit against the holders and the
// first waiter alone (rediswatch; docs/design.md allows it "where the
// driver can tell cheaply") queues such a permit, to refuse it later.
func WaiterConflicts(c Case) bool {
	var m Model
	for id, s := range c.Steps {
		if s.Op != Leave {
			held := m.q[:queue.Holders(m.q)]
			if queue.Conflict(m.q, s.Entry) != 0 && queue.Conflict(held, s.Entry) == 0 {
				return true
			}
		}
		m.Apply(id, s)
	}
	return false
}
