//go:build !chaos_skip_redisnx

package chaos

import (
	"time"

	_ "github.com/dlock-go/dlock/driver/redisnx"
)

func init() {
	register(&target{name: "redisnx", backend: RedisBackend, ttl: time.Second, open: openURL("redisnx://%s/0")})
}
