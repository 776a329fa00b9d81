package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
)

// TestAudit41WrongCANotOutage: a client that trusts the wrong CA fails
// every handshake with "x509: certificate signed by unknown authority": a
// misconfiguration, not an unreachable backend. By lock's outage rule a
// waiting Lock fails at once with it and TryLock does not say
// ErrUnavailable. connFailure counts every error that is not a PgError as
// a connection failure, so Lock waited for its context's end (fixed:
// connFailure excludes a *tls.CertificateVerificationError).
func TestAudit41WrongCANotOutage(t *testing.T) {
	pg := testserver.StartPostgres(t, &testserver.PostgresOptions{TLS: &testserver.TLSOptions{}})
	l := tlsOpen(t, pgTLSURL(pg, "tls_ca", pg.TLS.WrongCAFile))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	key := auditKey("audit41-wrongca")
	_, err := l.TryLock(ctx, key)
	t.Logf("TryLock: %v", err)
	if err == nil {
		t.Fatal("TryLock granted through a client that trusts the wrong CA")
	}
	if errors.Is(err, lock.ErrUnavailable) {
		t.Errorf("TryLock: %v; a certificate refusal is not an unreachable backend", err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 8*time.Second)
	defer wcancel()
	start := time.Now()
	_, err = l.Lock(wctx, key)
	took := time.Since(start)
	t.Logf("Lock: %v after %v", err, took)
	if err == nil || took > 4*time.Second {
		t.Errorf("Lock took %v and returned %v; want a prompt failure with the certificate's error", took, err)
	}
}
