package testserver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"strings"
	"testing"
	"time"
)

// TestTLSServers checks each backend's TLS option on this provider: the
// server answers over TLS with the CA and the client certificate, and
// refuses a plain connection, a client without a certificate (ClientAuth)
// and a client that trusts the wrong CA.
func TestTLSServers(t *testing.T) {
	t.Parallel()
	type probe func(ctx context.Context, addr string, tc *tls.Config) error
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) (string, *TLS)
		probe probe
	}{
		{"redis", func(t *testing.T) (string, *TLS) {
			r := StartRedis(t, &RedisOptions{TLS: &TLSOptions{ClientAuth: true}})
			return r.Addr(), r.TLS
		}, func(ctx context.Context, addr string, tc *tls.Config) error { return redisPinger(tc)(ctx, addr) }},
		{"memcached", func(t *testing.T) (string, *TLS) {
			m := StartMemcached(t, &MemcachedOptions{TLS: &TLSOptions{ClientAuth: true}})
			return m.Addr(), m.TLS
		}, func(ctx context.Context, addr string, tc *tls.Config) error { return memcachedVersioner(tc)(ctx, addr) }},
		{"zookeeper", func(t *testing.T) (string, *TLS) {
			z := StartZooKeeper(t, &ZooKeeperOptions{TLS: &TLSOptions{ClientAuth: true}})
			if i, err := z.Leader(); err != nil || i != 0 {
				t.Errorf("Leader over TLS: %d, %v", i, err)
			}
			return z.Addr(), z.TLS
		}, func(ctx context.Context, addr string, tc *tls.Config) error { return zkServer(tc)(ctx, addr) }},
		{"postgres", func(t *testing.T) (string, *TLS) {
			p := StartPostgres(t, &PostgresOptions{TLS: &TLSOptions{ClientAuth: true}})
			// The harness's psql, over TLS with the URL's files (local)
			// or the container's socket.
			if out, err := p.Exec("SELECT 1;"); err != nil || out != "1" {
				t.Errorf("Exec on a TLS server: %q, %v", out, err)
			}
			if !strings.Contains(p.URL(), "sslmode=verify-full") {
				t.Errorf("URL of a TLS server: %s; want sslmode=verify-full", p.URL())
			}
			return p.Addr(), p.TLS
		}, func(ctx context.Context, addr string, tc *tls.Config) error {
			return pgStartup("postgres", "postgres", tc)(ctx, addr)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			addr, files := tc.start(t)
			if files == nil {
				t.Fatal("no TLS files for a server started with TLS")
			}
			try := func(c *tls.Config) error {
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				defer cancel()
				return tc.probe(ctx, addr, c)
			}
			if err := try(files.ClientConfig()); err != nil {
				t.Fatalf("over TLS with the CA and the client certificate: %v", err)
			}
			if err := try(nil); err == nil {
				t.Error("a plain connection was served")
			}
			noCert := files.ClientConfig()
			noCert.Certificates = nil
			if err := try(noCert); err == nil {
				t.Error("a client without a certificate was served (ClientAuth)")
			}
			wrong := files.ClientConfig()
			pem, err := os.ReadFile(files.WrongCAFile)
			must(t, err)
			wrong.RootCAs = x509.NewCertPool()
			wrong.RootCAs.AppendCertsFromPEM(pem)
			if err := try(wrong); err == nil || !strings.Contains(err.Error(), "certificate") {
				t.Errorf("trusting the wrong CA: got %v, want a certificate error", err)
			}
			for _, f := range []string{files.CAFile, files.CertFile, files.KeyFile} {
				if _, err := os.Stat(f); err != nil {
					t.Error(err)
				}
			}
		})
	}
}
