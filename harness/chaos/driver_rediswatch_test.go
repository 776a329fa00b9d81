//go:build !chaos_skip_rediswatch

package chaos

import (
	"time"

	_ "github.com/dlock-go/dlock/driver/rediswatch"
)

func init() {
	register(&target{name: "rediswatch", backend: RedisBackend, ttl: time.Second, open: openURL("rediswatch://%s/0")})
}
