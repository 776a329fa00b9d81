package redisnx_test

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver/memory"
	"github.com/dlock-go/dlock/driver/redisnx"
	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// maxMessage bounds every message below: a 1 MiB key or URL must not make
// a 1 MiB line.
const maxMessage = 1024

// durationRE finds the durations in a message: numbers with a unit.
var durationRE = regexp.MustCompile(`[0-9]+(\.[0-9]+)?(h|ms|µs|us|ns|m|s)\b`)

// checkMessage asserts what every error a user reads must be: one
// "invalid input" at most, no "driver:" (the SPI's sentinels are lock's
// words by then), durations of three significant digits at most, a bounded
// length, and the hint the case expects.
func checkMessage(t *testing.T, err error, hint string) {
	t.Helper()
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	if n := strings.Count(msg, "invalid input"); n > 1 {
		t.Errorf("%q appears %d times: %s", "invalid input", n, msg)
	}
	if strings.Contains(msg, "driver:") {
		t.Errorf("driver internals: %s", msg)
	}
	for _, d := range durationRE.FindAllString(msg, -1) {
		for _, num := range regexp.MustCompile(`[0-9.]+`).FindAllString(d, -1) {
			if digits := strings.TrimLeft(strings.ReplaceAll(num, ".", ""), "0"); len(digits) > 3 {
				t.Errorf("duration %s is not rounded: %s", d, msg)
			}
		}
	}
	if len(msg) > maxMessage {
		t.Errorf("message of %d bytes (over %d): %.300s...", len(msg), maxMessage, msg)
	}
	if !strings.Contains(msg, hint) {
		t.Errorf("message lacks %q: %.600s", hint, msg)
	}
}

// TestMessages provokes each kind of error on the memory driver and on
// redisnx, and reads what a user would read.
func TestMessages(t *testing.T) {
	addr := testserver.SharedRedis(t).Addr()
	huge := strings.Repeat("k", 1<<20)
	backends := []struct{ name, url string }{
		{"memory", "memory://messages"},
		{"redisnx", "redisnx://" + addr},
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			l, err := lock.Open(ctx, b.url)
			if err != nil {
				t.Fatal(err)
			}
			other, err := lock.Open(ctx, b.url)
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()
			key := "messages/" + b.name + "/" + time.Now().Format(time.RFC3339Nano)
			cases := []struct {
				name string
				call func() error
				is   []error
				hint string
			}{
				{"empty key", func() error { _, err := l.Lock(ctx, ""); return err }, []error{lock.ErrInvalid}, "empty key"},
				{"not UTF-8", func() error { _, err := l.Lock(ctx, "\xff"); return err }, []error{lock.ErrInvalid}, "UTF-8"},
				{"huge key", func() error { _, err := l.Lock(ctx, huge); return err }, []error{lock.ErrInvalid}, "(1048576 bytes)"},
				{"bad TTL", func() error { _, err := l.Lock(ctx, key, lock.WithTTL(time.Nanosecond)); return err }, []error{lock.ErrInvalid}, "TTL 1ns out of range"},
				{"held", func() error { _, err := other.TryLock(ctx, key+"/held"); return err }, []error{lock.ErrNotAcquired, lock.ErrHeld}, "held by another owner (free in at most 30s)"},
				{"held, deadline", func() error {
					c, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
					defer cancel()
					_, err := other.Lock(c, key+"/held")
					return err
				}, []error{lock.ErrNotAcquired, context.DeadlineExceeded}, "deadline exceeded"},
				{"limit differs", func() error {
					_, err := other.Acquire(ctx, key+"/sem", 3)
					return err
				}, []error{lock.ErrInvalid}, "semaphore of 2 permits, not 3"},
			}
			if _, err := l.Lock(ctx, key+"/held", lock.WithTTL(30*time.Second)); err != nil {
				t.Fatal(err)
			}
			if _, err := l.Acquire(ctx, key+"/sem", 2); err != nil {
				t.Fatal(err)
			}
			// A held key's hint is its PTTL plus 1 ms, rounded up: within
			// the millisecond of the grant, PTTL is the whole 30s, and the
			// hint 31s.
			time.Sleep(2 * time.Millisecond)
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					err := c.call()
					checkMessage(t, err, c.hint)
					for _, want := range c.is {
						if !errors.Is(err, want) {
							t.Errorf("errors.Is(%v) false for %v", want, err)
						}
					}
				})
			}
			_, err = l.Lock(ctx, huge)
			if le := (*lock.Error)(nil); !errors.As(err, &le) || le.Key != huge {
				t.Errorf("huge key: the *lock.Error does not hold the key whole: %T", err)
			}
			l.Close()
			_, err = l.Lock(ctx, key)
			checkMessage(t, err, "locker closed")
			if !errors.Is(err, lock.ErrClosed) {
				t.Errorf("closed: errors.Is(ErrClosed) false for %v", err)
			}
		})
	}
	t.Run("bad Options", func(t *testing.T) {
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		for _, l := range []*lock.Locker{
			memory.New(memory.NewStore(), &lock.Options{TTL: time.Nanosecond}),
			redisnx.New(c, &redisnx.Options{Options: lock.Options{TTL: time.Nanosecond}}),
		} {
			_, err := l.Lock(context.Background(), "k")
			checkMessage(t, err, "Options.TTL")
			if !errors.Is(err, lock.ErrInvalid) {
				t.Errorf("errors.Is(ErrInvalid) false for %v", err)
			}
			l.Close()
		}
	})
	t.Run("redisnx/not held", func(t *testing.T) {
		testNotHeldMessage(t, addr)
	})
	t.Run("open", func(t *testing.T) {
		for _, c := range []struct{ url, hint string }{
			{"redisnx://h:x", `malformed URL "redisnx://h:x"`},
			{"redisnx://h?ttl=" + huge, "(1048576 bytes)"},
			{"redisnx://h?" + huge + "=1", "(1048576 bytes)"},
			{"nosuch://h", "is the driver package imported?"},
			{"redis://" + addr, "redisnx:// (Lua scripts) and rediswatch://"},
			{"rediss://" + addr, "redisnxs:// (Lua scripts) and rediswatchs://"},
			{"//" + addr, "has no scheme"},
		} {
			_, err := lock.Open(context.Background(), c.url)
			checkMessage(t, err, c.hint)
			if !errors.Is(err, lock.ErrInvalid) {
				t.Errorf("%.40s: errors.Is(ErrInvalid) false for %v", c.url, err)
			}
		}
	})
}

// testNotHeldMessage deletes a lease's key behind its back: Refresh finds
// the grant gone (the driver's ErrNotHeld), and says so in lock's words.
func testNotHeldMessage(t *testing.T, addr string) {
	ctx := context.Background()
	l, err := lock.Open(ctx, "redisnx://"+addr+"?autorenew=false")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	key := "messages/notheld/" + time.Now().Format(time.RFC3339Nano)
	lease, err := l.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	if err := c.Del(ctx, redisx.LockKey(redisx.DefaultPrefix, key)).Err(); err != nil {
		t.Fatal(err)
	}
	err = lease.Refresh(ctx, 10*time.Second)
	checkMessage(t, err, `lock: not held: refresh "`+key+`"`)
	if !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("errors.Is(ErrNotHeld) false for %v", err)
	}
	checkMessage(t, lease.Err(), "refresh: the backend no longer has the grant")
	if msg := lease.Err().Error(); strings.Contains(msg, "not held") {
		t.Errorf("the cause says \"not held\" after saying it in words: %s", msg)
	}
}
