// Package errtext shapes what an error message shows of a value, so that
// every message of lock, its drivers and internal/redisx reads the same
// way: a user-supplied value (a key, a URL, a parameter) is quoted and cut
// to MaxShown bytes, with its full length, so that a 1 MiB key makes a
// short line; a duration the code computed is rounded to what a reader
// can use (30s, not 29.999996585s). A value the user gave is quoted as
// given, only shortened: rounding it could make it read as valid (9.99ms
// as 10ms in "below the 10ms minimum").
//
// It imports only the standard library, so that lock, the drivers and
// cmd/dlock can all use it.
package errtext

import (
	"strconv"
	"time"
	"unicode/utf8"
)

// MaxShown is how many bytes of a value a message shows at most.
const MaxShown = 128

// Quote returns s quoted as fmt's %q does. When s is longer than MaxShown
// bytes, it quotes its first MaxShown bytes (cut at a rune boundary) and
// says how long s is: "abc..."... (1048576 bytes).
func Quote(s string) string {
	if len(s) <= MaxShown {
		return strconv.Quote(s)
	}
	return strconv.Quote(cut(s)) + "... (" + strconv.Itoa(len(s)) + " bytes)"
}

// Bound returns s unquoted, cut as Quote cuts it, for text that embeds a
// user-supplied value in a way the caller does not control (another
// package's error).
func Bound(s string) string {
	if len(s) <= MaxShown {
		return s
	}
	return cut(s) + "... (" + strconv.Itoa(len(s)) + " bytes)"
}

// cut returns the longest prefix of s of at most MaxShown bytes that ends
// at a rune boundary.
func cut(s string) string {
	n := MaxShown
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Duration rounds d for a message: whole seconds from 10s, tenths of a
// second from 1s, milliseconds from 1ms, microseconds below; so that it
// prints with at most three significant digits per unit (30s, 2.5s,
// 250ms, 1m30s).
func Duration(d time.Duration) time.Duration { return d.Round(unit(d)) }

// Ceil is Duration rounding up, for a bound that must hold as printed
// ("free in at most 1.3s" for 1.24s).
func Ceil(d time.Duration) time.Duration {
	u := unit(d)
	r := d.Truncate(u) // toward zero: up for a negative d
	if r < d {
		return r + u
	}
	return r
}

// unit is the precision Duration keeps for d.
func unit(d time.Duration) time.Duration {
	if d < 0 {
		d = -d
	}
	switch {
	case d >= 10*time.Second:
		return time.Second
	case d >= time.Second:
		return 100 * time.Millisecond
	case d >= time.Millisecond:
		return time.Millisecond
	}
	return time.Microsecond
}
