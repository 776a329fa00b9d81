//go:build !chaos_skip_memcached

package chaos

import (
	"time"

	_ "github.com/dlock-go/dlock/driver/memcached"
)

func init() {
	// The driver refuses TTLs under 3s (memcached counts whole seconds) and
	// grants N seconds a validity of N-2, while lock renews at TTL/3: at 3s
	// every lease would be lost before its first renewal. 4s leaves 2s.
	register(&target{name: "memcached", backend: MemcachedBackend, ttl: 4 * time.Second, open: openURL("memcached://%s")})
}
