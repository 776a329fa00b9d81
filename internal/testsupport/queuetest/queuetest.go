// Package queuetest runs one table of queue histories against every
// implementation of the queue rule (package queue): the Go package, the
// Go drivers, the Lua scripts of redisnx, the WATCH plan of rediswatch and
// the PL/pgSQL of postgres. A history is a list of steps (an entry joins
// the queue, tries once without queueing, or leaves); after each step the
// implementation says which entries hold the key, and Run compares that
// with the rule.
package queuetest

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/queue"
)

// Op is what a step does.
type Op uint8

const (
	// Join: an entry joins the queue (a blocking Lock or Acquire), and
	// holds the key at once if the rule grants it.
	Join Op = iota
	// Try: an attempt that does not queue (TryLock): it holds the key if
	// the rule grants it at the end of the queue, else it leaves nothing.
	Try
	// Leave: the entry made by step ID leaves the queue, released if it
	// was granted.
	Leave
)

func (o Op) String() string { return [...]string{"join", "try", "leave"}[o] }

// Step is one step of a history. An entry is named by the index of the
// step that made it (its id).
type Step struct {
	Op    Op
	Entry queue.Entry // Join, Try
	ID    int         // Leave: the id of the entry that leaves
}

func (s Step) String() string {
	if s.Op == Leave {
		return fmt.Sprintf("leave #%d", s.ID)
	}
	return s.Op.String() + " " + EntryString(s.Entry)
}

// EntryString writes e as x, s or pN.
func EntryString(e queue.Entry) string {
	switch e.Kind {
	case queue.Shared:
		return "s"
	case queue.Permit:
		return fmt.Sprintf("p%d", e.Limit)
	}
	return "x"
}

// Case is a history, and for the table the ids granted after each step
// (Want[i] after Steps[i]), written by hand; random histories have none.
type Case struct {
	Name  string
	Steps []Step
	Want  [][]int
}

// Outcome is what a Join or Try step did.
type Outcome uint8

const (
	Queued  Outcome = iota // joined and waits (Join), or refused as held (Try)
	Granted                // holds the key
	Refused                // refused for a permit limit that differs from the key's (driver.ErrInvalid)
	Left                   // Leave steps
)

func (o Outcome) String() string { return [...]string{"queued", "granted", "refused", "left"}[o] }

// Model is the rule applied to a history: the live entries in order.
type Model struct {
	ids []int
	q   []queue.Entry
}

// Apply applies step s, the history's step id, and returns its outcome.
func (m *Model) Apply(id int, s Step) Outcome {
	switch s.Op {
	case Leave:
		if i := slices.Index(m.ids, s.ID); i >= 0 {
			m.ids = slices.Delete(m.ids, i, i+1)
			m.q = slices.Delete(m.q, i, i+1)
		}
		return Left
	}
	if queue.Conflict(m.q, s.Entry) != 0 {
		return Refused
	}
	m.ids = append(m.ids, id)
	m.q = append(m.q, s.Entry)
	if queue.Granted(m.q, len(m.q)-1) {
		return Granted
	}
	if s.Op == Try {
		m.ids, m.q = m.ids[:len(m.ids)-1], m.q[:len(m.q)-1]
	}
	return Queued
}

// Live returns the ids of the live entries, in queue order.
func (m *Model) Live() []int { return slices.Clone(m.ids) }

// Holders returns the ids of the entries that hold the key.
func (m *Model) Holders() []int { return slices.Clone(m.ids[:queue.Holders(m.q)]) }

// Entry returns the entry of id.
func (m *Model) Entry(id int) queue.Entry { return m.q[slices.Index(m.ids, id)] }

// Backend is an implementation under test, over one key of its own.
type Backend interface {
	// Do carries out step s, the history's step id, and returns its
	// outcome (Left for a Leave).
	Do(id int, s Step) (Outcome, error)
	// Holders returns which of the live entries (ids, in queue order, as
	// the model has them) hold the key, in that order; a waiter whose turn
	// has come takes the key first, as its next check would. want is the
	// rule's answer, for backends that wait to be woken (see
	// DriverBackend): they may wait longer for those, never decide by it.
	Holders(live, want []int) ([]int, error)
}

// Run runs every history against the backend newBackend makes for it (a
// fresh key each), each in a subtest named by the case.
func Run(t *testing.T, cases []Case, newBackend func(t *testing.T) Backend) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) { RunCase(t, c, newBackend(t)) })
	}
}

// RunCase runs one history against b, and fails t at the first step whose
// outcome or holders differ from the rule's (or from the case's Want).
func RunCase(t *testing.T, c Case, b Backend) {
	t.Helper()
	var m Model
	for id, s := range c.Steps {
		want := m.Apply(id, s)
		got, err := b.Do(id, s)
		if err != nil {
			t.Fatalf("%s: step %d (%s): %v", trace(c, id), id, s, err)
		}
		if got != want {
			t.Fatalf("%s: step %d (%s): %s, the rule says %s", trace(c, id), id, s, got, want)
		}
		holders, err := b.Holders(m.Live(), m.Holders())
		if err != nil {
			t.Fatalf("%s: after step %d (%s): holders: %v", trace(c, id), id, s, err)
		}
		if !slices.Equal(holders, m.Holders()) {
			t.Fatalf("%s: after step %d (%s): holders %v, the rule says %v", trace(c, id), id, s, holders, m.Holders())
		}
		if c.Want != nil && !slices.Equal(m.Holders(), c.Want[id]) && !(len(c.Want[id]) == 0 && len(m.Holders()) == 0) {
			t.Fatalf("%s: after step %d (%s): the rule says %v, the table %v", trace(c, id), id, s, m.Holders(), c.Want[id])
		}
	}
}

// trace writes the history up to step n, for failures.
func trace(c Case, n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s [", c.Name)
	for i, s := range c.Steps[:n+1] {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "#%d %s", i, s)
	}
	b.WriteString("]")
	return b.String()
}
