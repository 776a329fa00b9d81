package etcd

import (
	"context"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// Inspect implements driver.Inspector with one read (a KV/Txn of two
// ranges, at one revision): the holders are the entries the grant rule
// grants, in queue order, the waiters the rest. Tokens and times are
// those the entries' values record (times by the writer's clock); the
// time left would take a request per lease, so it is not told.
func (d *etcdDriver) Inspect(ctx context.Context, key string) (driver.KeyState, error) {
	var ks driver.KeyState
	c, err := d.client()
	if err != nil {
		return ks, err
	}
	st, err := d.read(ctx, c, d.names(key), 0)
	if err != nil {
		return ks, err
	}
	ks.Unknown.Remaining = true
	for i, e := range st.entries {
		mode := e.modeForGrants
		if !turn(st.entries[:i], mode, e.v.limit) {
			if len(ks.Waiters) == driver.MaxInspectWaiters {
				ks.MoreWaiters = true
				break
			}
			w := driver.Waiter{Owner: e.owner(), Mode: mode}
			if mode == driver.Permit {
				w.Limit = e.v.limit
			}
			if e.foreign {
				ks.Unknown.Since = true
			} else {
				w.Since = time.UnixMicro(e.v.since)
			}
			ks.Waiters = append(ks.Waiters, w)
			continue
		}
		h := driver.Holder{Owner: e.owner(), Mode: mode, Foreign: e.foreign, Token: e.v.token, Note: e.v.note}
		switch {
		case e.dlockNamed && len(e.v.holds) > 0:
			h.Owner, h.Holds = e.v.holds[0], len(e.v.holds)
		case mode == driver.Permit:
			h.Limit = e.v.limit
		}
		if e.foreign {
			ks.Unknown.Since = true
		} else {
			h.Since = time.UnixMicro(e.v.since)
		}
		if h.Token == 0 {
			ks.Unknown.Tokens = true
		}
		ks.Holders = append(ks.Holders, h)
	}
	return ks, nil
}
