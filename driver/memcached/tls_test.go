package memcached

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/internal/testsupport/tlstest"
	"github.com/dlock-go/dlock/lock"
)

// TestTLS: locks over TLS against memcached -Z requiring a client
// certificate, by URL (memcached://...?tls_ca=...) and by Options.TLS.
func TestTLS(t *testing.T) {
	m := testserver.StartMemcached(t, &testserver.MemcachedOptions{Servers: 2, TLS: &testserver.TLSOptions{ClientAuth: true}})
	_, port, _ := net.SplitHostPort(m.Node(1).Addr())
	tlstest.Run(t, tlstest.Target{
		// The second server by name: it is verified by the URL's host,
		// localhost, though gomemcache dials the address it resolved.
		URL: "memcached://" + m.Node(0).Addr() + ",localhost:" + port,
		TLS: m.TLS,
		New: func(ctx context.Context, tc *tls.Config) (*lock.Locker, error) {
			c := memcache.New(m.Addrs()...)
			o := &Options{TLS: tc}
			o.ReleaseTimeout = 300 * time.Millisecond // see tlstest.Target.New
			return New(c, o), nil
		},
	})
}

// TestTLSOwnDialer: Options.TLS does not replace a DialContext the
// client already has.
func TestTLSOwnDialer(t *testing.T) {
	c := memcache.New("127.0.0.1:1")
	c.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		return nil, errors.New("the user's dialer")
	}
	l := New(c, &Options{TLS: &tls.Config{}})
	defer l.Close()
	_, err := l.TryLock(context.Background(), "k")
	if !errors.Is(err, lock.ErrInvalid) {
		t.Fatalf("TryLock: %v; want ErrInvalid", err)
	}
}
