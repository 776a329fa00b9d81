package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// TestAudit41MissingSchemaNotOutage: under NoCreate, a schema that is not
// installed is a refusal to fix (run SchemaSQL), not an outage: lock's
// outage rule says a waiting call fails at once with the error, and a Try
// call's error is not ErrUnavailable. connFailure counts every error that
// is not a PgError as a connection failure, the driver's own "schema is
// missing" message included, so Lock waited until its context ended
// (fixed: that error is notInstalled, which connFailure excludes).
func TestAudit41MissingSchemaNotOutage(t *testing.T) {
	url := serverURL(t)
	l := newLockerWith(t, url, &Options{Schema: "audit41_never_installed", NoCreate: true}, &netCut{})
	key := auditKey("audit41-nocreate")
	ctx := tctx(t, 60*time.Second)
	_, err := l.TryLock(ctx, key)
	if err == nil {
		t.Fatal("TryLock granted without a schema")
	}
	if errors.Is(err, lock.ErrUnavailable) {
		t.Errorf("TryLock: %v; a missing schema is not an unreachable backend", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 8*time.Second)
	defer cancel()
	start := time.Now()
	_, err = l.Lock(wctx, key)
	took := time.Since(start)
	if err == nil {
		t.Fatal("Lock granted without a schema")
	}
	t.Logf("Lock: %v after %v", err, took)
	if took > 4*time.Second || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Lock took %v and returned %v; want a prompt failure with the schema error", took, err)
	}
}
