package lock

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/dlock-go/dlock/driver"
)

func checkKey(key string) error { return checkName("key", key) }

// Reasons for refusing nil and zero values with ErrInvalid.
var (
	errNilLocker  = errors.New("nil *Locker")
	errNilContext = errors.New("nil context.Context (use context.Background() or context.TODO())")
	errNoLease    = errors.New("not a Lease granted by a Locker (a nil or zero *Lease)")
)

// checkName checks a key or an owner id (what names it in the error).
func checkName(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("empty %s", what)
	case len(s) > MaxKeyLen:
		return fmt.Errorf("%s of %d bytes is longer than %d", what, len(s), MaxKeyLen)
	case !utf8.ValidString(s):
		return fmt.Errorf("%s is not valid UTF-8", what)
	}
	return nil
}

// checkNote checks a WithNote text: at most MaxNoteLen bytes of
// printable UTF-8.
// MaxNoteLen is driver.MaxNoteLen: this fails to compile if they differ.
const _ = uint(MaxNoteLen-driver.MaxNoteLen) + uint(driver.MaxNoteLen-MaxNoteLen)

func checkNote(s string) error {
	switch {
	case len(s) > MaxNoteLen:
		return fmt.Errorf("note of %d bytes is longer than %d", len(s), MaxNoteLen)
	case !utf8.ValidString(s):
		return fmt.Errorf("note is not valid UTF-8")
	case strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0:
		return fmt.Errorf("note %q has a character that is not printable", s)
	}
	return nil
}

func checkTTL(ttl time.Duration) error {
	if ttl < MinTTL || ttl > MaxTTL {
		return fmt.Errorf("TTL %v out of range [%v, %v]", ttl, MinTTL, MaxTTL)
	}
	return nil
}

// driftMargin is subtracted from a grant's validity to get the local
// deadline (driver.DriftMargin).
func driftMargin(validity time.Duration) time.Duration { return driver.DriftMargin(validity) }
