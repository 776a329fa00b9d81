package redisnx

import (
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redisx"
)

func TestSlot(t *testing.T) {
	for key, want := range map[string]int{
		"123456789":            12739, // CRC16/XMODEM check value 0x31c3
		"{user1000}.following": redisx.Slot("user1000"),
		"foo{}{bar}":           redisx.Slot("foo{}{bar}"),
		"":                     0,
	} {
		if got := redisx.Slot(key); got != want {
			t.Errorf("redisx.Slot(%q) = %d, want %d", key, got, want)
		}
	}
	// The server agrees, for lock keys of odd user keys.
	c := sharedCluster(t)
	ctx := tctx(t, 10*time.Second)
	for _, k := range []string{"a", "}x", "}", "{", "a}b", "{x}", "nul\x00", "é", "x}:fence"} {
		lk := lockKey(DefaultPrefix, k)
		want, err := c.ClusterKeySlot(ctx, lk).Result()
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT: %v", err)
		}
		if got := redisx.Slot(lk); int64(got) != want {
			t.Errorf("redisx.Slot(%q) = %d, server says %d", lk, got, want)
		}
		if s := c.ClusterKeySlot(ctx, lk+counterSuffix).Val(); s != want {
			t.Errorf("key %q: counter in slot %d, lock in %d", k, s, want)
		}
		if s := c.ClusterKeySlot(ctx, lk+redisx.VoidInfix+ownerA).Val(); s != want {
			t.Errorf("key %q: tombstone in slot %d, lock in %d", k, s, want)
		}
	}
}

// Distinct user keys never share a Redis name, of any kind.
func TestNamesDistinct(t *testing.T) {
	keys := []string{"a", "b", "}a", "a}", "{a", "a{", "}", "{", "{}", "}{", "a:fence", "a}:fence", "a}:void:" + ownerA, "\u00ff"}
	seen := map[string]string{}
	for _, k := range keys {
		lk := lockKey(DefaultPrefix, k)
		for _, n := range []string{lk, lk + counterSuffix, lk + redisx.VoidInfix + ownerA, lk + queueSuffix, lk + entriesSuffix, lk + readersSuffix} {
			if prev, dup := seen[n]; dup {
				t.Errorf("keys %q and %q share the name %q", prev, k, n)
			}
			seen[n] = k
		}
	}
}

// names, made in one allocation, are the names spelled out.
func TestNamesSpelledOut(t *testing.T) {
	for _, k := range []string{"a", "}x", "é", "a}:fence"} {
		lk := lockKey(DefaultPrefix, k)
		want := keyNames{lk, lk + counterSuffix, lk + redisx.VoidInfix + ownerA, lk + queueSuffix, lk + entriesSuffix, lk + readersSuffix, lk + channelSuffix}
		if got := names(DefaultPrefix, k, ownerA); *got != want {
			t.Errorf("names(%q) = %q, want %q", k, *got, want)
		}
	}
}
