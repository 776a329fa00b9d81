// Package tlstest is the one TLS test every driver runs against its real
// server started with TLS required and a client certificate demanded
// (testserver's TLSOptions{ClientAuth: true}): a driver's test makes a
// Target and calls Run.
//
//	func TestTLS(t *testing.T) {
//		m := testserver.StartMemcached(t, &testserver.MemcachedOptions{TLS: &testserver.TLSOptions{ClientAuth: true}})
//		tlstest.Run(t, tlstest.Target{URL: "memcached://" + m.Addr(), TLS: m.TLS})
//	}
//
// Through lock.Open with the URL parameters of internal/tlsconf it checks
// that a lock works over TLS (Lock, a second Locker excluded, Unlock),
// that a client trusting the wrong CA fails with a certificate error, that
// tls_insecure_skip_verify works without the CA, and that a client without
// its certificate is refused; with Target.New, the same through the
// driver's Options.
package tlstest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
)

// Target is one driver's TLS server.
type Target struct {
	// URL is the driver's URL for the server, without TLS parameters
	// (it may have others: then it contains '?').
	URL string
	// TLS is the server's files; the server requires the client
	// certificate.
	TLS *testserver.TLS
	// TLSURL, if set, is the URL with the driver's TLS scheme (Redis's
	// redisnxs://...): it works with the parameters too, and without
	// tls_ca it verifies with the system's roots, which refuse the
	// server.
	TLSURL string
	// New, if set, opens a Locker through the driver's Options with this
	// client TLS config (Options.TLS, or the client's own TLS settings),
	// and a short ReleaseTimeout (300ms): a Locker whose attempts failed
	// retries their releases in Close for that long.
	New func(ctx context.Context, tc *tls.Config) (*lock.Locker, error)
}

// timeout bounds each Open and each first Lock that must fail: a driver
// that retries a refused handshake until its context ends (ZooKeeper's
// connect loop, when it cannot tell) fails by then.
const timeout = 5 * time.Second

// Run runs the TLS checks on tg.
func Run(t *testing.T, tg Target) {
	t.Helper()
	f := tg.TLS
	if f == nil || !f.ClientAuth {
		t.Fatal("tlstest: the target needs a TLS server that requires client certificates")
	}
	open := func(t *testing.T, params ...string) (*lock.Locker, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		// A refused Locker's Close would retry the releases of its failed
		// attempts for the default ReleaseTimeout.
		return lock.OpenWith(ctx, withParams(tg.URL, params...), &lock.Options{ReleaseTimeout: 300 * time.Millisecond})
	}
	withCert := []string{"tls_cert", f.CertFile, "tls_key", f.KeyFile}

	t.Run("URL", func(t *testing.T) {
		a := mustOpen(t)(open(t, append([]string{"tls_ca", f.CAFile}, withCert...)...))
		b := mustOpen(t)(open(t, append([]string{"tls_ca", f.CAFile}, withCert...)...))
		exclusion(t, a, b)
	})
	t.Run("URLServerName", func(t *testing.T) {
		// The server's certificate names localhost too.
		a := mustOpen(t)(open(t, append([]string{"tls_ca", f.CAFile, "tls_server_name", "localhost"}, withCert...)...))
		exclusion(t, a, a)
	})
	t.Run("WrongCA", func(t *testing.T) {
		refused(t, "a client trusting the wrong CA", "certificate", open, append([]string{"tls_ca", f.WrongCAFile}, withCert...)...)
	})
	t.Run("WrongServerName", func(t *testing.T) {
		refused(t, "a client verifying another name", "certificate", open, append([]string{"tls_ca", f.CAFile, "tls_server_name", "db.example"}, withCert...)...)
	})
	t.Run("InsecureSkipVerify", func(t *testing.T) {
		a := mustOpen(t)(open(t, append([]string{"tls_insecure_skip_verify", "true"}, withCert...)...))
		b := mustOpen(t)(open(t, append([]string{"tls_insecure_skip_verify", "true"}, withCert...)...))
		exclusion(t, a, b)
	})
	t.Run("NoClientCertificate", func(t *testing.T) {
		// Not asserted on the text: in TLS 1.3 the client's handshake ends
		// before the server checks its certificate, and the server's alert
		// may be lost to the reset of the connection the client already
		// wrote on.
		refused(t, "a client without its certificate", "", open, "tls_ca", f.CAFile)
	})
	t.Run("Plain", func(t *testing.T) {
		refused(t, "a plain client", "", open)
	})
	if tg.TLSURL != "" {
		openTLS := func(t *testing.T, params ...string) (*lock.Locker, error) {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			return lock.OpenWith(ctx, withParams(tg.TLSURL, params...), &lock.Options{ReleaseTimeout: 300 * time.Millisecond})
		}
		t.Run("TLSScheme", func(t *testing.T) {
			a := mustOpen(t)(openTLS(t, append([]string{"tls_ca", f.CAFile}, withCert...)...))
			b := mustOpen(t)(openTLS(t, append([]string{"tls_ca", f.CAFile}, withCert...)...))
			exclusion(t, a, b)
		})
		t.Run("TLSSchemeSystemRoots", func(t *testing.T) {
			refused(t, "the TLS scheme with the system's roots", "certificate", openTLS, withCert...)
		})
	}
	if tg.New == nil {
		return
	}
	t.Run("Options", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		a := mustOpen(t)(tg.New(ctx, f.ClientConfig()))
		b := mustOpen(t)(tg.New(ctx, f.ClientConfig()))
		exclusion(t, a, b)
	})
	t.Run("OptionsWrongCA", func(t *testing.T) {
		pem, err := os.ReadFile(f.WrongCAFile)
		if err != nil {
			t.Fatal(err)
		}
		tc := f.ClientConfig()
		tc.RootCAs = x509.NewCertPool()
		tc.RootCAs.AppendCertsFromPEM(pem)
		refused(t, "Options.TLS trusting the wrong CA", "certificate", func(t *testing.T, _ ...string) (*lock.Locker, error) {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			return tg.New(ctx, tc)
		})
	})
}

// withParams adds the query parameters (name, value pairs) to raw.
func withParams(raw string, params ...string) string {
	if len(params) == 0 {
		return raw
	}
	q := url.Values{}
	for i := 0; i < len(params); i += 2 {
		q.Set(params[i], params[i+1])
	}
	sep := "?"
	if strings.Contains(raw, "?") {
		sep = "&"
	}
	return raw + sep + q.Encode()
}

func mustOpen(t *testing.T) func(*lock.Locker, error) *lock.Locker {
	return func(l *lock.Locker, err error) *lock.Locker {
		t.Helper()
		if err != nil {
			t.Fatalf("open over TLS: %v", err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
}

// exclusion locks a key through a, checks that b (another Locker, or a
// itself) cannot take it, unlocks it and takes it through b.
func exclusion(t *testing.T, a, b *lock.Locker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	key := "tls/" + strings.ReplaceAll(t.Name(), "/", "-")
	la, err := a.Lock(ctx, key, lock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatalf("Lock over TLS: %v", err)
	}
	if lb, err := b.TryLock(ctx, key); !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, lock.ErrHeld) {
		if lb != nil {
			lb.Unlock(ctx)
		}
		t.Fatalf("TryLock of a held key through the other Locker: %v, %v; want ErrNotAcquired and ErrHeld", lb, err)
	}
	if err := la.Unlock(ctx); err != nil {
		t.Fatalf("Unlock over TLS: %v", err)
	}
	lb, err := b.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("TryLock of the released key: %v", err)
	}
	if err := lb.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
}

// refused checks that a Locker opened with params fails, at Open or at
// its first Lock, with an error that contains want (when not "").
func refused(t *testing.T, who, want string, open func(*testing.T, ...string) (*lock.Locker, error), params ...string) {
	t.Helper()
	l, err := open(t, params...)
	if err == nil {
		defer l.Close()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		var lease *lock.Lease
		if lease, err = l.TryLock(ctx, "tls/refused"); err == nil {
			lease.Unlock(ctx)
			t.Fatalf("%s was served: a lock was granted", who)
		}
		if want == "certificate" {
			notOutage(t, who, l, err)
		}
	}
	if errors.Is(err, lock.ErrInvalid) {
		t.Fatalf("%s: %v: refused as invalid input, not by the server", who, err)
	}
	if want != "" && !strings.Contains(err.Error(), want) {
		t.Fatalf("%s: got %v; want an error saying %q", who, err, want)
	}
	t.Logf("%s: %v", who, err)
}

// notOutage checks that a certificate that fails verification, a
// misconfiguration, is not taken for an outage: TryLock's error, err,
// does not say ErrUnavailable, and a waiting Lock fails at once rather
// than waiting for its context.
func notOutage(t *testing.T, who string, l *lock.Locker, err error) {
	t.Helper()
	if errors.Is(err, lock.ErrUnavailable) {
		t.Errorf("%s: TryLock: %v; a certificate refusal is not an unreachable backend", who, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*timeout)
	defer cancel()
	start := time.Now()
	lease, err := l.Lock(ctx, "tls/refused")
	took := time.Since(start)
	if err == nil {
		lease.Unlock(ctx)
		t.Fatalf("%s was served: Lock granted", who)
	}
	if took > timeout || errors.Is(err, lock.ErrUnavailable) {
		t.Errorf("%s: Lock: %v after %v; want a prompt failure, not an outage ridden out", who, err, took)
	}
}
