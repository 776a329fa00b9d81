package postgres

import (
	"context"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// Inspect implements driver.Inspector with one read-only statement (a
// snapshot): the key's live entries in queue order, with everything the
// table keeps of them. It never creates the schema: where there is none,
// the key is free; where it is of an older version, Inspect fails.
func (d *pgDriver) Inspect(ctx context.Context, key string) (driver.KeyState, error) {
	var st driver.KeyState
	if there, err := d.check(ctx, false); err != nil || !there {
		return st, err // no schema: nobody holds or waits for anything
	}
	c, err := d.pool.Acquire(ctx)
	if err != nil {
		return st, err
	}
	defer c.Release()
	defer dropIfEnded(ctx, c.Conn().PgConn()) // before Release (see dropIfEnded)
	rows, err := c.Query(ctx, d.q.inspect, d.args(key)...)
	if err != nil {
		return st, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			owner         string
			mode          int16
			limit         int32
			granted       bool
			token         int64
			left          time.Duration
			since, joined *time.Time
			holds         int32
			note          *string
		)
		if err := rows.Scan(&owner, &mode, &limit, &granted, &token, &left, &since, &joined, &holds, &note); err != nil {
			return driver.KeyState{}, err
		}
		m := driver.Mode(mode)
		if m != driver.Permit {
			limit = 0
		}
		if granted {
			h := driver.Holder{Owner: owner, Mode: m, Limit: int(limit), Token: uint64(token), Remaining: left}
			if since != nil {
				h.Since = *since
			}
			if holds >= 0 {
				h.Holds = int(holds)
			}
			if note != nil {
				h.Note = *note
			}
			if token == 0 {
				st.Unknown.Tokens = true // a row written behind dlock's back
			}
			st.Holders = append(st.Holders, h)
			continue
		}
		if len(st.Waiters) == driver.MaxInspectWaiters {
			st.MoreWaiters = true
			continue
		}
		w := driver.Waiter{Owner: owner, Mode: m, Limit: int(limit)}
		if joined != nil {
			w.Since = *joined
		}
		st.Waiters = append(st.Waiters, w)
	}
	if err := rows.Err(); err != nil {
		return driver.KeyState{}, err
	}
	return st, nil
}
