package lock

import (
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/dlock-go/dlock/driver"
)

func checkKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("empty key")
	case len(key) > MaxKeyLen:
		return fmt.Errorf("key of %d bytes is longer than %d", len(key), MaxKeyLen)
	case !utf8.ValidString(key):
		return fmt.Errorf("key is not valid UTF-8")
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
