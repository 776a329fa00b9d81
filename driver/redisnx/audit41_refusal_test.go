package redisnx

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
)

// TestAudit41WrongPasswordNotOutage: a wrong password, or a user whose ACL
// refuses scripts, is a refusal, not an outage: a waiting Lock fails at
// once with it, and a Try call's error is not ErrUnavailable.
func TestAudit41WrongPasswordNotOutage(t *testing.T) {
	r := testserver.StartRedis(t, &testserver.RedisOptions{User: "audit41", ACLRules: []string{"-@scripting"}})
	for _, tc := range []struct{ name, url string }{
		{"WrongPassword", "redisnx://audit41:wrong@" + r.Addr()},
		{"NoScripts", "redisnx://audit41:" + r.Password + "@" + r.Addr()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			l, err := lock.Open(ctx, tc.url)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				start := time.Now()
				l.Close()
				t.Logf("Close took %v", time.Since(start))
			}()
			_, err = l.TryLock(ctx, "audit41-refused")
			if err == nil || errors.Is(err, lock.ErrUnavailable) || errors.Is(err, lock.ErrHeld) {
				t.Errorf("TryLock: %v; want a refusal, neither ErrUnavailable nor ErrHeld", err)
			}
			wctx, wcancel := context.WithTimeout(ctx, 8*time.Second)
			defer wcancel()
			start := time.Now()
			_, err = l.Lock(wctx, "audit41-refused")
			took := time.Since(start)
			t.Logf("Lock: %v after %v", err, took)
			if err == nil || took > 4*time.Second || errors.Is(err, lock.ErrUnavailable) {
				t.Errorf("Lock: %v after %v; want a prompt refusal", err, took)
			}
		})
	}
}
