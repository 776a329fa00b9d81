package memory

import (
	"context"

	"github.com/dlock-go/dlock/driver"
)

var _ driver.Inspector = (*memDriver)(nil)

// Inspect implements driver.Inspector: the key's live grants and its
// waiters, in queue order, with everything a Store knows of them (token,
// expiry, when each was granted or joined). It drops nothing, not even
// the expired grants that the next call on the key will.
func (d *memDriver) Inspect(ctx context.Context, key string) (driver.KeyState, error) {
	var st driver.KeyState
	if err := d.alive(ctx); err != nil {
		return st, err
	}
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.keys[key] // not queueLocked, which drops expired grants
	if q == nil {
		return st, nil
	}
	now := s.now()
	for _, e := range q.entries {
		mode := driver.Exclusive
		switch {
		case e.shared:
			mode = driver.Shared
		case e.limit > 0:
			mode = driver.Permit
		}
		if e.granted {
			if !now.Before(e.expires) {
				continue // expired: it holds nothing
			}
			h := driver.Holder{Owner: e.owner, Mode: mode, Limit: e.limit, Token: e.token, Remaining: e.expires.Sub(now), Since: e.since, Note: e.note}
			if e.holds != nil {
				h.Holds = len(e.holds)
			}
			if h.Token == 0 {
				st.Unknown.Tokens = true // StealKey's intruder
			}
			st.Holders = append(st.Holders, h)
			continue
		}
		if len(st.Waiters) == driver.MaxInspectWaiters {
			st.MoreWaiters = true
			continue
		}
		st.Waiters = append(st.Waiters, driver.Waiter{Owner: e.owner, Mode: mode, Limit: e.limit, Since: e.joined})
	}
	return st, nil
}
