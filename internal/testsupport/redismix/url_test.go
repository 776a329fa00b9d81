package redismix

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// The same URL, with redisnx:// or rediswatch://, makes the same client:
// one parser (internal/redisx) reads both, go-redis's parameters
// included, and both refuse the same bad URLs.
func TestSameURLSameClient(t *testing.T) {
	describe := func(l *lock.Locker) string {
		var c *redis.Client
		var cc *redis.ClusterClient
		switch {
		case l.As(&cc):
			o := cc.Options()
			return fmt.Sprintf("cluster %v %q %q tls=%v pool=%d read=%v ctx=%v", o.Addrs, o.Username, o.Password, o.TLSConfig != nil, o.PoolSize, o.ReadTimeout, o.ContextTimeoutEnabled)
		case l.As(&c):
			o := c.Options()
			return fmt.Sprintf("single %s %q %q db=%d tls=%v pool=%d read=%v proto=%d name=%q ctx=%v", o.Addr, o.Username, o.Password, o.DB, o.TLSConfig != nil, o.PoolSize, o.ReadTimeout, o.Protocol, o.ClientName, o.ContextTimeoutEnabled)
		}
		return "no client"
	}
	for _, rest := range []string{
		"://",
		"://h",
		"://u:p@h:7000/3?pool_size=4&read_timeout=2s&protocol=2&client_name=app",
		"s://h:7000?ttl=5s",
		"://h1:1,h2:2?max_redirects=2",
		"://h?prefix=app:",
	} {
		var got []string
		for _, scheme := range []string{"redisnx", "rediswatch"} {
			l, err := lock.Open(context.Background(), scheme+rest)
			if err != nil {
				t.Errorf("Open(%s%s): %v", scheme, rest, err)
				continue
			}
			got = append(got, describe(l))
			l.Close()
		}
		if len(got) == 2 && got[0] != got[1] {
			t.Errorf("%s: redisnx makes %s, rediswatch %s", rest, got[0], got[1])
		}
	}
	for _, rest := range []string{"://h?bogus=1", "://a:1,b:2?cluster=false", "://h:0", "://h?pool_size=x"} {
		for _, scheme := range []string{"redisnx", "rediswatch"} {
			if l, err := lock.Open(context.Background(), scheme+rest); err == nil {
				l.Close()
				t.Errorf("Open(%s%s) succeeded", scheme, rest)
			} else if !strings.Contains(err.Error(), "invalid") {
				t.Errorf("Open(%s%s): %v", scheme, rest, err)
			}
		}
	}
}
