package memcached

import (
	"fmt"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// TTL bounds of this driver, narrower than lock's.
const (
	// MinTTL is the shortest lease time: a grant of N whole seconds is only
	// sure to last N-2 seconds on memcached's coarse clock (see the package
	// doc), so 3 s is the least that leaves a lease any validity.
	MinTTL = 3 * time.Second
	// MaxTTL is the longest lease time: memcached reads an expiration of
	// more than 30 days as an absolute Unix time.
	MaxTTL = 30 * 24 * time.Hour
)

// clockLoss is how much shorter than its nominal N seconds a memcached item
// may live, measured from the moment its request was sent: up to one second
// because the server's clock is a whole-second counter read at the last
// tick, and up to one more because its once-a-second timer runs late and
// the counter then skips a second.
const clockLoss = 2 * time.Second

// ttlSeconds checks ttl and returns it in whole seconds, rounded up.
func ttlSeconds(ttl time.Duration) (int32, error) {
	switch {
	case ttl < MinTTL:
		return 0, fmt.Errorf("%w: TTL %v is shorter than memcached's minimum %v (memcached counts whole seconds on a clock that ticks once a second, so a grant of N seconds is only sure to last N-2)",
			driver.ErrInvalid, ttl, MinTTL)
	case ttl > MaxTTL:
		return 0, fmt.Errorf("%w: TTL %v is longer than memcached's maximum %v (memcached reads a longer expiration as an absolute Unix time)",
			driver.ErrInvalid, ttl, MaxTTL)
	}
	return int32((ttl + time.Second - 1) / time.Second), nil
}

// validity is how long after its request was sent an item stored with an
// expiration of secs seconds is sure to live.
func validity(secs int32) time.Duration {
	return time.Duration(secs)*time.Second - clockLoss
}
