package redisnx

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/internal/testsupport/tlstest"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// TestTLS: locks over TLS against a Redis server with tls-port only and
// tls-auth-clients yes, by URL (redisnx:// with the tls_* parameters, and
// redisnxs://) and by the caller's redis.Options.TLSConfig.
func TestTLS(t *testing.T) {
	r := testserver.StartRedis(t, &testserver.RedisOptions{TLS: &testserver.TLSOptions{ClientAuth: true}})
	tlstest.Run(t, tlstest.Target{
		URL:    Scheme + "://" + r.Addr(),
		TLSURL: SchemeTLS + "://" + r.Addr(),
		TLS:    r.TLS,
		New: func(ctx context.Context, tc *tls.Config) (*lock.Locker, error) {
			c := redis.NewClient(&redis.Options{Addr: r.Addr(), TLSConfig: tc})
			t.Cleanup(func() { c.Close() })
			o := &Options{}
			o.ReleaseTimeout = 300 * time.Millisecond // see tlstest.Target.New
			return New(c, o), nil
		},
	})
}
