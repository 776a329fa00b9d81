package postgres

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// TestAudit41TryLockHungServer: lock's outage rule says a Try call fails
// with ErrUnavailable within the client's own bound on a request to a
// dead server (a second or two) or its context. Against a server that
// accepts connections and never answers (a paused process, a proxy whose
// far side is cut), pgx has no bound of its own (no connect_timeout by
// default, no read timeout), so TryLock blocks until its context ends, and
// then says DeadlineExceeded, not ErrUnavailable.
func TestAudit41TryLockHungServer(t *testing.T) {
	if os.Getenv("DLOCK_AUDIT_OPEN") != "1" {
		t.Skip("open finding: postgres TryLock blocks until its context ends on a server that never answers")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c) // read nothing, answer nothing
		}
	}()
	url := "postgres://postgres@" + ln.Addr().String() + "/postgres?sslmode=disable"
	l := newLockerWith(t, url, nil, &netCut{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	_, err = l.TryLock(ctx, auditKey("audit41-hung"))
	took := time.Since(start)
	t.Logf("TryLock: %v after %v", err, took)
	if took > 8*time.Second || !errors.Is(err, lock.ErrUnavailable) {
		t.Errorf("TryLock on a server that never answers: %v after %v; want ErrUnavailable within a few seconds", err, took)
	}
}
