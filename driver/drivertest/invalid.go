package drivertest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// C9: bad keys, TTLs and options are refused with ErrInvalid before any
// I/O (so even with a cancelled context), by Lock, TryLock and Refresh.
func testInvalidInput(t *testing.T, h Harness) {
	l := h.NewLocker(t, nil)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	ok := key(t)
	bad := []struct {
		name string
		key  string
		opts []lock.Option
	}{
		{"empty key", "", nil},
		{"oversized key", strings.Repeat("k", lock.MaxKeyLen+1), nil},
		{"key not UTF-8", "bad\xffkey", nil},
		{"negative TTL", ok, []lock.Option{lock.WithTTL(-time.Second)}},
		{"TTL below lock.MinTTL", ok, []lock.Option{lock.WithTTL(lock.MinTTL - 1)}},
		{"TTL above lock.MaxTTL", ok, []lock.Option{lock.WithTTL(lock.MaxTTL + 1)}},
		{"nil Option", ok, []lock.Option{nil}},
		{"nil RetryStrategy", ok, []lock.Option{lock.WithRetry(nil)}},
	}
	if min := h.Caps().MinTTL; min > lock.MinTTL {
		bad = append(bad, struct {
			name string
			key  string
			opts []lock.Option
		}{"TTL below the driver's minimum", ok, []lock.Option{lock.WithTTL(min / 2)}})
	}
	for _, tc := range bad {
		for op, call := range map[string]func(context.Context, string, ...lock.Option) (*lock.Lease, error){"Lock": l.Lock, "TryLock": l.TryLock} {
			lease, err := call(cancelled, tc.key, tc.opts...)
			if lease != nil || !errors.Is(err, lock.ErrInvalid) {
				t.Errorf("%s with %s: err = %v, want ErrInvalid", op, tc.name, err)
			}
			if errors.Is(err, context.Canceled) {
				t.Errorf("%s with %s: the context was consulted before validation: %v", op, tc.name, err)
			}
		}
	}
	lease := mustLock(t, l, ok)
	// (Refresh(ctx, 0) is the Locker's default TTL, as WithTTL(0) is.)
	for _, ttl := range []time.Duration{lock.MinTTL - 1, -time.Second, lock.MaxTTL + 1} {
		if err := lease.Refresh(cancelled, ttl); !errors.Is(err, lock.ErrInvalid) {
			t.Errorf("Refresh(%v): err = %v, want ErrInvalid", ttl, err)
		}
	}
	if err := lease.Err(); err != nil {
		t.Errorf("an invalid Refresh changed the lease: Err() = %v", err)
	}
	lease.Unlock(ctx(t, 10*time.Second))
}

// C9: every key a user can pass either works, exclusively and without
// colliding with any other key, or is refused with ErrInvalid; none is
// truncated or mangled into another.
func testOddKeys(t *testing.T, h Harness) {
	a, b := h.NewLocker(t, nil), h.NewLocker(t, nil)
	p := key(t) + "/"
	long := strings.Repeat("x", lock.MaxKeyLen-len(p)-1)
	mid := strings.Repeat("y", 300)
	keys := []string{
		p + "a b", p + "a_b", p + "new\nline", p + "tab\t", p + "nul\x00byte", p + "ctl\x01",
		p + "slash/inside", p + "slash//double", p + "trailing/", p + ".", p + "..",
		p + "unicodé ключ 鍵 🔒", p + "{hashtag}", p + "*?[]%", p + "colon:semi;",
		p + long + "1", p + long + "2", p + mid + "1", p + mid + "2",
		p + "UPPER", p + "upper",
	}
	var held []*lock.Lease
	for _, k := range keys {
		lease, err := a.TryLock(ctx(t, 10*time.Second), k)
		if errors.Is(err, lock.ErrInvalid) {
			t.Logf("key %q refused: %v", k, err)
			continue
		}
		if err != nil {
			t.Errorf("TryLock(%q): %v (a collision with an earlier key, or a key the backend could not carry)", k, err)
			continue
		}
		held = append(held, lease)
	}
	if len(held) < len(keys)/2 {
		t.Errorf("only %d of %d odd keys work", len(held), len(keys))
	}
	for _, lease := range held {
		assertHeld(t, b, lease.Key(), "grant of "+lease.Key())
	}
	for _, lease := range held {
		if err := lease.Unlock(ctx(t, 10*time.Second)); err != nil {
			t.Errorf("Unlock(%q): %v", lease.Key(), err)
		}
		assertNoResidue(t, h, lease.Key())
	}
}
