package redisnx

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/redis/go-redis/v9"
)

var (
	//go:embed inspect.lua
	inspectLua    string
	inspectScript = redis.NewScript(inspectLua)
)

var _ driver.Inspector = (*redisDriver)(nil)

// Inspect implements driver.Inspector with inspect.lua, which only reads:
// one round trip, one snapshot. Holders are read in the layout both Redis
// drivers share (redisx.Grants): an exclusive grant's token is the
// counter's (a named owner's, its holds' "t"); readers and permits have no
// token kept; a holder's note is its field in the notes hash. Waiters are this driver's queue (P{K}:q, P{K}:w), by
// arrival, live entries only (rediswatch queues its own waiters apart).
func (d *redisDriver) Inspect(ctx context.Context, key string) (driver.KeyState, error) {
	var st driver.KeyState
	if err := ctx.Err(); err != nil {
		return st, err
	}
	lk := d.LockKey(key)
	keys := []string{lk, lk + counterSuffix, lk + queueSuffix, lk + entriesSuffix, lk + readersSuffix, lk + permitsSuffix, lk + redisx.HoldsSuffix, lk + redisx.NotesSuffix}
	res, err := inspectScript.Run(ctx, d.Lanes, keys, driver.MaxInspectWaiters).Slice()
	if err != nil {
		return st, fmt.Errorf("redisnx: inspect: %w", redisx.WithCtx(ctx, err))
	}
	st, err = parseInspect(res)
	if err != nil {
		return st, fmt.Errorf("redisnx: inspect: %w", err)
	}
	return st, nil
}

// parseInspect reads inspect.lua's reply.
func parseInspect(res []any) (driver.KeyState, error) {
	var st driver.KeyState
	if len(res) != 12 {
		return st, fmt.Errorf("unexpected reply of %d elements", len(res))
	}
	str := func(v any) string { s, _ := v.(string); return s }
	num := func(v any) int64 {
		switch n := v.(type) {
		case int64:
			return n
		case string:
			i, _ := strconv.ParseInt(n, 10, 64)
			return i
		}
		return 0
	}
	sec, usec := num(res[0]), num(res[1])
	nowMS := sec*1000 + usec/1000
	g := redisx.Grants{
		Value: str(res[2]), Held: res[2] != nil,
		PTTL: num(res[3]), NowMS: nowMS, Fence: str(res[4]),
		HoldsTok: str(res[7]), HoldsLen: num(res[8]),
	}
	var err error
	if g.Notes, err = redisx.ParseNotes(res[11]); err != nil {
		return st, err
	}
	if g.Readers, err = members(res[5]); err != nil {
		return st, err
	}
	if g.Permits, err = members(res[6]); err != nil {
		return st, err
	}
	st.Holders, st.Unknown = g.Holders()
	queue, err := members(res[9])
	if err != nil {
		return st, err
	}
	entries, _ := res[10].([]any)
	if len(entries) != len(queue) {
		return st, fmt.Errorf("%d queue entries for %d waiters", len(entries), len(queue))
	}
	if len(queue) > driver.MaxInspectWaiters {
		queue, st.MoreWaiters = queue[:driver.MaxInspectWaiters], true
	}
	for i, m := range queue {
		w, ok := parseEntry(str(entries[i]), nowMS)
		if !ok {
			continue // dead, or handed the key (a holder now)
		}
		w.Owner, w.Since = m.Owner, time.UnixMicro(int64(m.Expiry))
		st.Waiters = append(st.Waiters, w)
	}
	return st, nil
}

// members reads a ZRANGE ... WITHSCORES reply.
func members(v any) ([]redisx.Member, error) {
	a, _ := v.([]any)
	if len(a)%2 != 0 {
		return nil, fmt.Errorf("a sorted set's reply of %d elements", len(a))
	}
	var ms []redisx.Member
	for i := 0; i < len(a); i += 2 {
		o, _ := a[i].(string)
		s, _ := a[i+1].(string)
		score, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("score %q of %q: %v", s, o, err)
		}
		ms = append(ms, redisx.Member{Owner: o, Expiry: score})
	}
	return ms, nil
}

// parseEntry reads a waiter's entry in P{K}:w (prelude.lua):
// "DEADLINE_MS MODE 0 INBOX", MODE being "TTL_MS", "sTTL_MS" or
// "pLIMIT/TTL_MS", or an older version's "DEADLINE_MS TTL_MS INBOX". It
// reports false for an entry that is dead at now (ms), missing (""), a
// hand-over's "gTOKEN", or unreadable.
func parseEntry(e string, now int64) (driver.Waiter, bool) {
	f := strings.Fields(e)
	if len(f) < 3 {
		return driver.Waiter{}, false
	}
	deadline, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil || deadline < now {
		return driver.Waiter{}, false
	}
	mode, limit, ok := redisx.EntryMode(f[1])
	if !ok {
		return driver.Waiter{}, false
	}
	return driver.Waiter{Mode: mode, Limit: limit}, true
}
