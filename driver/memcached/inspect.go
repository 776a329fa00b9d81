package memcached

import (
	"context"
	"errors"
	"fmt"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/dlock-go/dlock/driver"
)

var _ driver.Inspector = (*mcDriver)(nil)

// Inspect implements driver.Inspector with one get of the lock item,
// which changes nothing (not even its expiry, as a touch would). Its value
// tells the holder: an owner token (an anonymous grant, whose token the
// driver cannot tell: the counter is drawn after the add, so its value may
// be the previous grant's), a named owner's holds with the grant's token
// ("H FIRST TOKEN OWNER:SECS ...", see holds.go), or anything else (a
// foreign value); a note after either is the grant's (see noteSep). The item's expiry cannot be read (gomemcache has no
// meta commands), nor when it was made; and no waiter is known: waiters
// poll with add, and the server keeps no queue.
func (d *mcDriver) Inspect(ctx context.Context, key string) (driver.KeyState, error) {
	st := driver.KeyState{Unknown: driver.Unknown{Remaining: true, Waiters: true}}
	if err := ctx.Err(); err != nil {
		return st, err
	}
	c, ln, err := d.lanes.take(ctx)
	if err != nil {
		return st, err
	}
	defer d.lanes.put(ln)
	it, err := c.Get(d.keys(key).lock)
	switch {
	case errors.Is(err, memcache.ErrCacheMiss):
		return st, nil
	case err != nil:
		return st, fmt.Errorf("memcached inspect: get: %w", err)
	}
	st.Unknown.Since = true
	v, note := splitNote(it.Value)
	h := driver.Holder{Owner: string(v), Mode: driver.Exclusive, Note: note}
	if hv, ok := parseHolds(v); ok {
		h.Owner, h.Token, h.Holds = hv.first, hv.token, len(hv.holds)
	} else if !driver.IsOwner(h.Owner) {
		h.Foreign = true
	}
	st.Unknown.Tokens = h.Token == 0
	st.Holders = []driver.Holder{h}
	return st, nil
}
