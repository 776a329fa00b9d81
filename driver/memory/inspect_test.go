package memory

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/driver/drivertest"
)

var _ driver.Inspector = (*memDriver)(nil)

// inspectCaps: a Store knows everything about its grants and queue.
var inspectCaps = &drivertest.InspectCaps{Tokens: true, SharedTokens: true, Remaining: true, Since: true, Waiters: true, WaiterSince: true}

// Dump lists key's entries as the Store has them, expired ones included,
// and its counter.
func (h *harness) Dump(ctx context.Context, key string) ([]string, error) {
	s := h.s
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []string{}
	if c, ok := s.counters[key]; ok {
		out = append(out, fmt.Sprintf("counter %d", c))
	}
	if q, ok := s.keys[key]; ok {
		out = append(out, fmt.Sprintf("queue of %d", len(q.entries)))
		for _, e := range q.entries {
			out = append(out, fmt.Sprintf("entry %s granted=%v shared=%v limit=%d token=%d expires=%d since=%d joined=%d holds=%q",
				e.owner, e.granted, e.shared, e.limit, e.token, e.expires.UnixNano(), e.since.UnixNano(), e.joined.UnixNano(), slices.Sorted(maps.Keys(e.holds))))
		}
	}
	return out, nil
}
