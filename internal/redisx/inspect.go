package redisx

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// Grants is what both drivers' Inspect read of a key's grants, in one
// snapshot (redisnx's script, rediswatch's transaction), in the layout
// they share (see the names above):
//
//	GET P{K}; PTTL P{K}; TIME; ZRANGE P{K}:r 0 -1 WITHSCORES;
//	ZRANGE P{K}:s 0 -1 WITHSCORES; HGET P{K}:h t; HLEN P{K}:h; GET P{K}:fence
type Grants struct {
	Value    string // P{K}'s value
	Held     bool   // P{K} exists
	PTTL     int64  // P{K}'s PTTL in ms (-1: no expiry)
	NowMS    int64  // the server's clock, in ms
	Readers  []Member
	Permits  []Member
	HoldsTok string // HGET P{K}:h t; "" when missing
	HoldsLen int64  // HLEN P{K}:h
	Fence    string // P{K}:fence; "" when missing
	// Notes are P{K}:n's fields: owner token -> note (see NotesSuffix).
	Notes map[string]string
}

// ParseNotes reads an HGETALL reply of P{K}:n (a flat list of fields and
// values; RESP3's map too).
func ParseNotes(v any) (map[string]string, error) {
	switch a := v.(type) {
	case nil:
		return nil, nil
	case map[any]any:
		m := make(map[string]string, len(a))
		for k, v := range a {
			ks, _ := k.(string)
			vs, _ := v.(string)
			m[ks] = vs
		}
		return m, nil
	case []any:
		if len(a)%2 != 0 {
			return nil, fmt.Errorf("a notes reply of %d elements", len(a))
		}
		m := make(map[string]string, len(a)/2)
		for i := 0; i < len(a); i += 2 {
			k, _ := a[i].(string)
			v, _ := a[i+1].(string)
			m[k] = v
		}
		return m, nil
	}
	return nil, fmt.Errorf("unexpected notes reply %T", v)
}

// Member is a member of a readers' or permits' set: an owner, scored by
// when its share or permit expires (server clock, ms).
type Member struct {
	Owner  string
	Expiry float64
}

// Holders returns the live grants g describes, by the rules the drivers
// grant with, and what they cannot tell:
//
//   - P{K} missing: nobody (members of P{K}:r or P{K}:s left without it
//     hold nothing);
//   - Readers ("R"): each live member of P{K}:r, a reader whose time left
//     is its score less the server's clock; no token is kept for it;
//   - PermitsValue(N) ("S<N>"): each live member of P{K}:s, a permit of
//     N, likewise;
//   - an owner token (32 lowercase hex digits) with "t" in P{K}:h: a named
//     owner's grant, whose token is "t" and whose holds are the other
//     fields of P{K}:h;
//   - another owner token: an exclusive grant, whose token is the
//     counter's value: every grant of the key moves the counter in the
//     step that grants it (script or transaction), and no grant of the key
//     comes while an exclusive one holds it, so the counter is the
//     holder's token unless it was lost (deleted, evicted) since;
//   - any other value: a foreign lock (a plain SET NX lock), exclusive,
//     with no token.
//
// "R" or "S<N>" with no live member is stale (its holders expired): no
// holder. Redis records when no grant was made: Since is always unknown.
func (g *Grants) Holders() ([]driver.Holder, driver.Unknown) {
	var u driver.Unknown
	if !g.Held {
		return nil, u
	}
	u.Since = true
	remaining := time.Duration(g.PTTL) * time.Millisecond
	if g.PTTL < 0 {
		remaining = driver.NoExpiry
	}
	var hs []driver.Holder
	members := func(ms []Member, mode driver.Mode, limit int) {
		for _, m := range ms {
			left := int64(m.Expiry) - g.NowMS
			if left < 0 {
				continue // expired: it holds nothing
			}
			hs = append(hs, driver.Holder{Owner: m.Owner, Mode: mode, Limit: limit, Remaining: time.Duration(left) * time.Millisecond})
			u.Tokens = true
		}
	}
	switch {
	case g.Value == Readers:
		members(g.Readers, driver.Shared, 0)
	case permitsLimit(g.Value) > 0:
		members(g.Permits, driver.Permit, permitsLimit(g.Value))
	case driver.IsOwner(g.Value):
		h := driver.Holder{Owner: g.Value, Mode: driver.Exclusive, Remaining: remaining}
		if tok, err := strconv.ParseUint(g.HoldsTok, 10, 64); err == nil && tok > 0 {
			h.Token, h.Holds = tok, max(int(g.HoldsLen)-1, 1)
		} else if tok, err := strconv.ParseUint(g.Fence, 10, 64); err == nil && tok > 0 {
			h.Token = tok
		}
		u.Tokens = h.Token == 0
		hs = append(hs, h)
	default:
		hs = append(hs, driver.Holder{Owner: g.Value, Foreign: true, Mode: driver.Exclusive, Remaining: remaining})
		u.Tokens = true
	}
	for i := range hs {
		if !hs[i].Foreign {
			hs[i].Note = g.Notes[hs[i].Owner]
		}
	}
	if len(hs) == 0 {
		u = driver.Unknown{}
	}
	return hs, u
}

// permitsLimit returns N when v is PermitsValue(N), else 0.
func permitsLimit(v string) int {
	s, ok := strings.CutPrefix(v, "S")
	if !ok {
		return 0
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || strconv.Itoa(n) != s {
		return 0
	}
	return n
}

// EntryMode parses the mode part of a waiter's queue entry, common to both
// drivers' queues: "TTL" for an exclusive waiter, "sTTL" for a reader,
// and a permit waiter's LIMIT before TTL, as "pLIMIT/TTL" (redisnx) or
// "pLIMIT:TTL" (rediswatch). It reports false for anything else.
func EntryMode(s string) (mode driver.Mode, limit int, ok bool) {
	switch {
	case strings.HasPrefix(s, "s"):
		return driver.Shared, 0, digits(s[1:])
	case strings.HasPrefix(s, "p"):
		i := strings.IndexAny(s, "/:")
		if i < 0 {
			return 0, 0, false
		}
		n, err := strconv.Atoi(s[1:i])
		if err != nil || n < 1 || !digits(s[i+1:]) {
			return 0, 0, false
		}
		return driver.Permit, n, true
	}
	return driver.Exclusive, 0, digits(s)
}

// digits reports whether s is a non-empty run of decimal digits.
func digits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}
