package etcd

import (
	"context"
	"crypto/tls"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/internal/testsupport/tlstest"
	"github.com/dlock-go/dlock/lock"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestTLS: locks over TLS against an etcd member that accepts TLS only
// and requires a client certificate, by URL with dlock's tls_*
// parameters, and by a client whose Config.TLS is set.
func TestTLS(t *testing.T) {
	e := testserver.StartEtcd(t, &testserver.EtcdOptions{TLS: &testserver.TLSOptions{ClientAuth: true}})
	tlstest.Run(t, tlstest.Target{
		URL: "etcd://" + e.Addr(),
		TLS: e.TLS,
		New: func(ctx context.Context, tc *tls.Config) (*lock.Locker, error) {
			c, err := clientv3.New(clientv3.Config{
				Endpoints:   []string{strings.Replace(e.Endpoints()[0], "http://", "https://", 1)},
				TLS:         tc,
				DialTimeout: 5 * time.Second,
				Logger:      zap.NewNop(),
			})
			if err != nil {
				return nil, err
			}
			t.Cleanup(func() { c.Close() })
			o := &Options{}
			o.ReleaseTimeout = 300 * time.Millisecond // see tlstest.Target.New
			return New(c, o), nil
		},
	})
}
