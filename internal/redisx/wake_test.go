package redisx

import "testing"

// TestWake checks the wake-up message both ways: the channel and payload
// Wake writes for each kind of waiter, and the owner parseWake reads back,
// also from the longer payloads of older versions.
func TestWake(t *testing.T) {
	const (
		lk    = "dlock:{k}"
		owner = "0123456789abcdef0123456789abcdef"
		inbox = "dlock:inbox:fedcba9876543210fedcba9876543210"
	)
	for _, c := range []struct {
		name, owner, inbox string
		wantCh, wantMsg    string
	}{
		{"queued with an inbox", owner, inbox, inbox, owner},
		{"queued without an inbox", owner, "", lk + ChannelSuffix, owner},
		{"no one named", "", "", lk + ChannelSuffix, ""},
		{"no one named, an inbox given", "", inbox, lk + ChannelSuffix, ""},
	} {
		ch, msg := Wake(lk, c.owner, c.inbox)
		if ch != c.wantCh || msg != c.wantMsg {
			t.Errorf("%s: Wake = (%q, %q), want (%q, %q)", c.name, ch, msg, c.wantCh, c.wantMsg)
		}
		if got := parseWake(msg); got != c.owner {
			t.Errorf("%s: parseWake(%q) = %q, want %q", c.name, msg, got, c.owner)
		}
	}
	for payload, want := range map[string]string{
		owner + " 1700000000000000 3":          owner, // an older version's grant
		owner + " 1700000000000000 3 " + owner: owner,
		"":                                     "",
	} {
		if got := parseWake(payload); got != want {
			t.Errorf("parseWake(%q) = %q, want %q", payload, got, want)
		}
	}
}
