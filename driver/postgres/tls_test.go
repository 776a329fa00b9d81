package postgres

import (
	"context"
	"crypto/tls"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/internal/testsupport/tlstest"
	"github.com/dlock-go/dlock/lock"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pgTLSURL is the URL of p's superuser without TLS parameters, with
// params (name, value pairs) added.
func pgTLSURL(p *testserver.Postgres, params ...string) string {
	q := url.Values{}
	for i := 0; i < len(params); i += 2 {
		q.Set(params[i], params[i+1])
	}
	u := &url.URL{Scheme: "postgres", User: url.UserPassword(p.User, p.Password), Host: p.Addr(), Path: "/" + p.Database, RawQuery: q.Encode()}
	return u.String()
}

// TestTLS: locks over TLS against a PostgreSQL that accepts TLS only and
// requires a client certificate, by URL with dlock's tls_* parameters
// and by a pool whose ConnConfig.TLSConfig is set.
func TestTLS(t *testing.T) {
	p := testserver.StartPostgres(t, &testserver.PostgresOptions{TLS: &testserver.TLSOptions{ClientAuth: true}})
	tlstest.Run(t, tlstest.Target{
		URL: pgTLSURL(p),
		TLS: p.TLS,
		New: func(ctx context.Context, tc *tls.Config) (*lock.Locker, error) {
			cfg, err := pgxpool.ParseConfig(pgTLSURL(p, "sslmode", "disable"))
			if err != nil {
				return nil, err
			}
			tc.ServerName = "127.0.0.1"
			cfg.ConnConfig.TLSConfig, cfg.ConnConfig.Fallbacks = tc, nil
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				return nil, err
			}
			t.Cleanup(pool.Close)
			o := &Options{}
			o.ReleaseTimeout = 300 * time.Millisecond // see tlstest.Target.New
			return New(pool, o), nil
		},
	})
}

// tlsOpen opens a Locker on rawURL, bounded by a short timeout, with a
// short ReleaseTimeout (a refused Locker's Close retries the releases of
// its failed attempts that long).
func tlsOpen(t *testing.T, rawURL string) *lock.Locker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l, err := lock.OpenWith(ctx, rawURL, &lock.Options{ReleaseTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatalf("Open: %v", err) // lock.Open's errors hide the password
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// tlsWorks takes and releases a key through l and checks that the
// pool's connection is encrypted (pg_stat_ssl).
func tlsWorks(t *testing.T, l *lock.Locker, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lease, err := l.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("TryLock over TLS: %v", err)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatalf("Unlock over TLS: %v", err)
	}
	var pool *pgxpool.Pool
	if !l.As(&pool) {
		t.Fatal("lock.As: no *pgxpool.Pool")
	}
	var ssl bool
	if err := pool.QueryRow(ctx, "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&ssl); err != nil || !ssl {
		t.Fatalf("pg_stat_ssl of the pool's connection: ssl %v, %v; want true", ssl, err)
	}
}

// tlsRefused checks that l's first TryLock fails with ErrNotAcquired (not
// ErrInvalid: the server or the handshake refused) and an error saying
// want.
func tlsRefused(t *testing.T, l *lock.Locker, who, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lease, err := l.TryLock(ctx, "tls/refused")
	if err == nil {
		lease.Unlock(ctx)
		t.Fatalf("%s was served: a lock was granted", who)
	}
	if !errors.Is(err, lock.ErrNotAcquired) || errors.Is(err, lock.ErrInvalid) || !strings.Contains(err.Error(), want) {
		t.Fatalf("%s: TryLock: %v; want ErrNotAcquired, not ErrInvalid, saying %q", who, err, want)
	}
	t.Logf("%s: %v", who, err)
}

// TestTLSURL: against a TLS-only server without client certificates,
// dlock's tls_* parameters and pgx's sslmode ones each work, a wrong CA
// fails on the first call (Open makes no connection) with the
// certificate's error, and a plain client is refused by the server.
func TestTLSURL(t *testing.T) {
	pg := testserver.StartPostgres(t, &testserver.PostgresOptions{TLS: &testserver.TLSOptions{}})
	f := pg.TLS
	t.Run("DlockCA", func(t *testing.T) {
		// The server is verified by the URL's host, 127.0.0.1 (the
		// default tls_server_name), which its certificate names.
		tlsWorks(t, tlsOpen(t, pgTLSURL(pg, "tls_ca", f.CAFile)), "tls/dlock-ca")
	})
	t.Run("DlockWrongCA", func(t *testing.T) {
		tlsRefused(t, tlsOpen(t, pgTLSURL(pg, "tls_ca", f.WrongCAFile)), "tls_ca trusting the wrong CA",
			"x509: certificate signed by unknown authority")
	})
	t.Run("DlockWrongCAOverridesSSLMode", func(t *testing.T) {
		// tls_* replaces pgx's TLS and its fallbacks: sslmode=prefer
		// would retry without TLS, disable would not try it.
		for _, mode := range []string{"prefer", "disable"} {
			tlsRefused(t, tlsOpen(t, pgTLSURL(pg, "tls_ca", f.WrongCAFile, "sslmode", mode)), "tls_ca with sslmode="+mode,
				"x509: certificate signed by unknown authority")
		}
	})
	t.Run("PgxVerifyFull", func(t *testing.T) {
		tlsWorks(t, tlsOpen(t, pgTLSURL(pg, "sslmode", "verify-full", "sslrootcert", f.CAFile)), "tls/pgx-verify-full")
	})
	t.Run("PgxWrongCA", func(t *testing.T) {
		tlsRefused(t, tlsOpen(t, pgTLSURL(pg, "sslmode", "verify-full", "sslrootcert", f.WrongCAFile)), "sslrootcert of the wrong CA",
			"certificate")
	})
	t.Run("Plain", func(t *testing.T) {
		tlsRefused(t, tlsOpen(t, pgTLSURL(pg, "sslmode", "disable")), "a plain client",
			"pg_hba.conf rejects connection")
	})
}

// TestTLSClientCertPgx: with a server requiring a client certificate,
// pgx's sslcert and sslkey present it; without them the server refuses.
func TestTLSClientCertPgx(t *testing.T) {
	pg := testserver.StartPostgres(t, &testserver.PostgresOptions{TLS: &testserver.TLSOptions{ClientAuth: true}})
	f := pg.TLS
	tlsWorks(t, tlsOpen(t, pgTLSURL(pg, "sslmode", "verify-full", "sslrootcert", f.CAFile, "sslcert", f.CertFile, "sslkey", f.KeyFile)), "tls/pgx-cert")
	tlsWorks(t, tlsOpen(t, pgTLSURL(pg, "tls_ca", f.CAFile, "tls_cert", f.CertFile, "tls_key", f.KeyFile)), "tls/dlock-cert")
	tlsRefused(t, tlsOpen(t, pgTLSURL(pg, "sslmode", "verify-full", "sslrootcert", f.CAFile)), "pgx without sslcert",
		"certificate")
	tlsRefused(t, tlsOpen(t, pgTLSURL(pg, "tls_ca", f.CAFile)), "tls_ca without tls_cert",
		"certificate")
}

// TestTLSNoPlainFallback: dlock's tls_* parameters want TLS on every
// connection: against a server without TLS they fail, even with pgx's
// sslmode=prefer (its default), whose fallback would connect in plain
// text.
func TestTLSNoPlainFallback(t *testing.T) {
	pg := testserver.SharedPostgres(t)
	f, err := testserver.NewTLSFiles(t.TempDir(), testserver.TLSOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, params := range [][]string{
		{"tls_ca", f.CAFile},
		{"tls_ca", f.CAFile, "sslmode", "prefer"},
		{"tls_insecure_skip_verify", "true", "sslmode", "allow"},
	} {
		tlsRefused(t, tlsOpen(t, pgTLSURL(pg, params...)), "tls_* on a server without TLS "+strings.Join(params, " "),
			"server refused TLS connection")
	}
}
