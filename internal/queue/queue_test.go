package queue_test

import (
	"slices"
	"testing"

	"github.com/dlock-go/dlock/internal/queue"
	"github.com/dlock-go/dlock/internal/testsupport/queuetest"
)

// model is the rule as a queuetest.Backend: the package itself, checked
// against the table's hand-written holders and against the random
// histories' (which only check that it runs and agrees with itself).
type model struct{ queuetest.Model }

func (m *model) Do(id int, s queuetest.Step) (queuetest.Outcome, error) {
	return m.Apply(id, s), nil
}

func (m *model) Holders(live, want []int) ([]int, error) { return m.Model.Holders(), nil }

func TestTable(t *testing.T) {
	queuetest.Run(t, queuetest.Table, func(t *testing.T) queuetest.Backend { return &model{} })
}

func TestRandom(t *testing.T) {
	queuetest.Run(t, queuetest.Random(1, 50, 40), func(t *testing.T) queuetest.Backend { return &model{} })
}

var (
	x  = queue.Entry{}
	s  = queue.Entry{Kind: queue.Shared}
	p1 = queue.Entry{Kind: queue.Permit, Limit: 1}
	p2 = queue.Entry{Kind: queue.Permit, Limit: 2}
	p3 = queue.Entry{Kind: queue.Permit, Limit: 3}
)

func TestGranted(t *testing.T) {
	for _, c := range []struct {
		name string
		q    []queue.Entry
		want int // holders
	}{
		{"empty", nil, 0},
		{"exclusive first", []queue.Entry{x, x}, 1},
		{"readers then writer", []queue.Entry{s, s, x, s}, 2},
		{"permits to the limit", []queue.Entry{p2, p2, p2}, 2},
		{"permit behind reader", []queue.Entry{s, p2}, 1},
		{"reader behind permit", []queue.Entry{p2, s}, 1},
		{"limits disagree", []queue.Entry{p3, p1, p3}, 1},
		{"limits disagree, room for both", []queue.Entry{p2, p3}, 1},
	} {
		if got := queue.Holders(c.q); got != c.want {
			t.Errorf("%s: Holders = %d, want %d", c.name, got, c.want)
		}
		for i := range c.q {
			if got := queue.Granted(c.q, i); got != (i < c.want) {
				t.Errorf("%s: Granted(%d) = %v", c.name, i, got)
			}
		}
	}
	if queue.Granted([]queue.Entry{x}, 1) || queue.Granted([]queue.Entry{x}, -1) {
		t.Error("Granted out of range")
	}
}

func TestWatch(t *testing.T) {
	for _, c := range []struct {
		name string
		q    []queue.Entry
		want []int // Watch of the last entry
	}{
		{"granted", []queue.Entry{s, s}, nil},
		{"writer: predecessor", []queue.Entry{s, s, x}, []int{1}},
		{"reader: nearest writer", []queue.Entry{x, s, s}, []int{0}},
		{"reader: nearest non-shared", []queue.Entry{x, s, p2, s, s}, []int{2}},
		{"permit: N before", []queue.Entry{p2, p2, p2, p2}, []int{1, 2}},
		{"permit: writer first", []queue.Entry{p2, x, p2, p2}, []int{1}},
		{"permit: N permits behind a writer", []queue.Entry{x, p2, p2, p2}, []int{1, 2}},
		{"permit: reader", []queue.Entry{s, p3}, []int{0}},
	} {
		if got := queue.Watch(c.q, len(c.q)-1); !slices.Equal(got, c.want) {
			t.Errorf("%s: Watch = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestHandOver(t *testing.T) {
	for _, c := range []struct {
		name string
		q    []queue.Entry
		i    int
		want []int
	}{
		{"writer to writer", []queue.Entry{x, x, x}, 0, []int{1}},
		{"writer to readers", []queue.Entry{x, s, s, x, s}, 0, []int{1, 2}},
		{"last reader to writer", []queue.Entry{s, x, s}, 0, []int{1}},
		{"one of two readers", []queue.Entry{s, s, x}, 1, nil},
		{"permit to the next", []queue.Entry{p2, p2, p2, p2}, 0, []int{2}},
		{"waiter leaves", []queue.Entry{s, x, s, s}, 1, []int{2, 3}},
		{"last holder", []queue.Entry{x}, 0, nil},
	} {
		if got := queue.HandOver(c.q, c.i); !slices.Equal(got, c.want) {
			t.Errorf("%s: HandOver = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestConflict(t *testing.T) {
	if got := queue.Conflict([]queue.Entry{x, p2}, p3); got != 2 {
		t.Errorf("Conflict = %d, want 2", got)
	}
	if got := queue.Conflict([]queue.Entry{p2}, s); got != 0 {
		t.Errorf("Conflict of a share = %d", got)
	}
}
