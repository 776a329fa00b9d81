package zookeeper

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/internal/testsupport/tlstest"
	"github.com/dlock-go/dlock/lock"
	"github.com/go-zookeeper/zk"
)

// TestTLS: locks over TLS against a ZooKeeper secureClientPort with
// ssl.clientAuth=need and no plain port, by URL (zookeeper://...?tls_ca=...)
// and by Options.TLS.
func TestTLS(t *testing.T) {
	z := testserver.StartZooKeeper(t, &testserver.ZooKeeperOptions{TLS: &testserver.TLSOptions{ClientAuth: true}})
	_, port, _ := net.SplitHostPort(z.Addr())
	tlstest.Run(t, tlstest.Target{
		// By name: the server is verified as localhost, the name given,
		// not as the address it resolves to.
		URL: "zookeeper://localhost:" + port + "/tls?session_timeout=4s",
		TLS: z.TLS,
		New: func(ctx context.Context, tc *tls.Config) (*lock.Locker, error) {
			o := &Options{Root: "/tls", SessionTimeout: 4 * time.Second, TLS: tc}
			o.ReleaseTimeout = 300 * time.Millisecond // see tlstest.Target.New
			return Dial(ctx, z.Addrs(), o)
		},
	})
}

// TestTLSDialFailsFast: a certificate that does not verify ends the wait
// for the first session at once with crypto/tls's error, not at the
// context's end: Open returns, and its first TryLock reports it; Dial
// fails with it. An unreachable server is reported once it refused.
func TestTLSDialFailsFast(t *testing.T) {
	z := testserver.StartZooKeeper(t, &testserver.ZooKeeperOptions{TLS: &testserver.TLSOptions{}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	l, err := lock.Open(ctx, "zookeeper://"+z.Addr()+"?tls_ca="+url.QueryEscape(z.TLS.WrongCAFile))
	if err != nil {
		t.Fatalf("Open trusting the wrong CA: %v; want it to connect in the background", err)
	}
	defer l.Close()
	_, err = l.TryLock(ctx, "k")
	if !errors.Is(err, lock.ErrNotAcquired) || !strings.Contains(err.Error(), "x509: certificate signed by unknown authority") || ctx.Err() != nil {
		t.Fatalf("TryLock trusting the wrong CA: %v after %v; want the x509 error before the context's end", err, time.Since(start))
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Open and TryLock trusting the wrong CA took %v", d)
	}
	o := &Options{TLS: &tls.Config{RootCAs: x509.NewCertPool()}}
	if _, err := Dial(ctx, z.Addrs(), o); err == nil || !strings.Contains(err.Error(), "x509: certificate signed by unknown authority") || ctx.Err() != nil {
		t.Fatalf("Dial trusting no CA: %v; want the x509 error before the context's end", err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	l, err = lock.Open(ctx, "zookeeper://"+addr+"?tls_insecure_skip_verify=true")
	if err != nil {
		t.Fatalf("Open of a closed port: %v", err)
	}
	defer l.Close()
	if _, err = l.TryLock(ctx, "k"); err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("TryLock on a closed port: %v; want the refused connection before the context's end", err)
	}
}

// TestTLSNewRefused: New cannot make its caller's connection TLS, so it
// refuses Options.TLS rather than lock in the clear.
func TestTLSNewRefused(t *testing.T) {
	// A connection that never gets anywhere: New makes no I/O of its own.
	conn, _, err := zk.Connect([]string{"127.0.0.1:1"}, 4*time.Second, zk.WithLogger(zkLogger{}), zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	l := New(conn, &Options{TLS: &tls.Config{}})
	defer l.Close()
	_, err = l.TryLock(context.Background(), "k")
	if !errors.Is(err, lock.ErrInvalid) || !strings.Contains(err.Error(), "Options.TLS is for Dial") {
		t.Fatalf("TryLock through New with Options.TLS: %v; want ErrInvalid naming Options.TLS", err)
	}
}
