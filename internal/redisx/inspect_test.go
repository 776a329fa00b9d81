package redisx

import (
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
)

func TestGrantsHolders(t *testing.T) {
	a, b := strings.Repeat("a", 32), strings.Repeat("b", 32)
	const now = 1_000_000
	for _, tc := range []struct {
		name    string
		g       Grants
		want    []driver.Holder
		unknown driver.Unknown
	}{
		{"free", Grants{NowMS: now, Readers: []Member{{a, now + 5}}}, nil, driver.Unknown{}},
		{"exclusive", Grants{Value: a, Held: true, PTTL: 1500, NowMS: now, Fence: "42"},
			[]driver.Holder{{Owner: a, Mode: driver.Exclusive, Token: 42, Remaining: 1500 * time.Millisecond}}, driver.Unknown{Since: true}},
		{"exclusive, counter lost", Grants{Value: a, Held: true, PTTL: 1500, NowMS: now},
			[]driver.Holder{{Owner: a, Mode: driver.Exclusive, Remaining: 1500 * time.Millisecond}}, driver.Unknown{Since: true, Tokens: true}},
		{"named", Grants{Value: a, Held: true, PTTL: 1500, NowMS: now, Fence: "50", HoldsTok: "42", HoldsLen: 3},
			[]driver.Holder{{Owner: a, Mode: driver.Exclusive, Token: 42, Holds: 2, Remaining: 1500 * time.Millisecond}}, driver.Unknown{Since: true}},
		{"readers, one expired", Grants{Value: Readers, Held: true, PTTL: 5000, NowMS: now, Readers: []Member{{a, now - 1}, {b, now + 2000}}},
			[]driver.Holder{{Owner: b, Mode: driver.Shared, Remaining: 2 * time.Second}}, driver.Unknown{Since: true, Tokens: true}},
		{"readers, all expired", Grants{Value: Readers, Held: true, PTTL: 5000, NowMS: now, Readers: []Member{{a, now - 1}}}, nil, driver.Unknown{}},
		{"permits", Grants{Value: PermitsValue(3), Held: true, PTTL: 5000, NowMS: now, Permits: []Member{{a, now + 1000}, {b, now + 3000}}, Readers: []Member{{b, now + 9000}}},
			[]driver.Holder{{Owner: a, Mode: driver.Permit, Limit: 3, Remaining: time.Second}, {Owner: b, Mode: driver.Permit, Limit: 3, Remaining: 3 * time.Second}}, driver.Unknown{Since: true, Tokens: true}},
		{"foreign", Grants{Value: "redsync", Held: true, PTTL: -1, NowMS: now, Fence: "42"},
			[]driver.Holder{{Owner: "redsync", Foreign: true, Mode: driver.Exclusive, Remaining: driver.NoExpiry}}, driver.Unknown{Since: true, Tokens: true}},
		{"S0 is no semaphore", Grants{Value: "S0", Held: true, PTTL: 10, NowMS: now},
			[]driver.Holder{{Owner: "S0", Foreign: true, Mode: driver.Exclusive, Remaining: 10 * time.Millisecond}}, driver.Unknown{Since: true, Tokens: true}},
	} {
		got, u := tc.g.Holders()
		if len(got) != len(tc.want) || u != tc.unknown {
			t.Errorf("%s: %+v, %+v; want %+v, %+v", tc.name, got, u, tc.want, tc.unknown)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%s: holder %d %+v; want %+v", tc.name, i, got[i], tc.want[i])
			}
		}
	}
}

func TestEntryMode(t *testing.T) {
	for _, tc := range []struct {
		s     string
		mode  driver.Mode
		limit int
		ok    bool
	}{
		{"30000", driver.Exclusive, 0, true},
		{"s30000", driver.Shared, 0, true},
		{"p4/30000", driver.Permit, 4, true},
		{"p4:30000", driver.Permit, 4, true},
		{"p0/30000", 0, 0, false},
		{"p4", 0, 0, false},
		{"s", 0, 0, false},
		{"", 0, 0, false},
		{"g123", 0, 0, false},
	} {
		mode, limit, ok := EntryMode(tc.s)
		if ok != tc.ok || (ok && (mode != tc.mode || limit != tc.limit)) {
			t.Errorf("EntryMode(%q) = %v, %d, %v; want %v, %d, %v", tc.s, mode, limit, ok, tc.mode, tc.limit, tc.ok)
		}
	}
}
