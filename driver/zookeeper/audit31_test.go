package zookeeper

import (
	"context"
	"log/slog"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
)

type countHandler struct {
	n    *atomic.Int64
	last *atomic.Value
}

func (h countHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h countHandler) Handle(_ context.Context, r slog.Record) error {
	h.n.Add(1)
	h.last.Store(r.Message)
	return nil
}
func (h countHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h countHandler) WithGroup(string) slog.Handler      { return h }

func a31CPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func audit31Dial(t *testing.T, timeout time.Duration, n *netCut, log *slog.Logger) *lock.Locker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	o := &Options{Root: testRoot, SessionTimeout: timeout, Dialer: n.dial}
	o.Logger = log
	l, err := Dial(ctx, testserver.SharedZooKeeper(t).Addrs(), o)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	return l
}

func lockUnlock(t *testing.T, l *lock.Locker, key string) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	t0 := time.Now()
	lease, err := l.Lock(ctx, key)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	took := time.Since(t0)
	if err := lease.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	return took
}

// An idle Locker, heartbeating, closes promptly and leaves no goroutine.
func TestAudit31IdleCloseLeaksNothing(t *testing.T) {
	const timeout = 2 * time.Second
	testserver.SharedZooKeeper(t)
	time.Sleep(100 * time.Millisecond)
	base := runtime.NumGoroutine()
	for i := 0; i < 3; i++ {
		l := audit31Dial(t, timeout, &netCut{}, nil)
		lockUnlock(t, l, "audit31-idle-close")
		time.Sleep(timeout * 3 / 4) // a few heartbeats, idle
		t0 := time.Now()
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if d := time.Since(t0); d > time.Second {
			t.Errorf("Close of an idle Locker took %v", d)
		}
	}
	end := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base && time.Now().Before(end) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > base {
		buf := make([]byte, 1<<20)
		s := string(buf[:runtime.Stack(buf, true)])
		var ours []string
		for _, g := range strings.Split(s, "\n\n") {
			if strings.Contains(g, "dlock") || strings.Contains(g, "zookeeper") {
				ours = append(ours, g)
			}
		}
		t.Errorf("%d goroutines 5 s after Close of 3 idle Lockers, %d before:\n%s", n, base, strings.Join(ours, "\n\n"))
	}
}

// An idle Locker whose server is unreachable neither spins nor floods its
// logger, and grants promptly once the server is back.
func TestAudit31IdleUnreachableNoSpin(t *testing.T) {
	const timeout = 2 * time.Second
	var n atomic.Int64
	var last atomic.Value
	cut := &netCut{}
	l := audit31Dial(t, timeout, cut, slog.New(countHandler{&n, &last}))
	defer l.Close()
	lockUnlock(t, l, "audit31-idle-down")
	time.Sleep(timeout / 2)
	logs0 := n.Load()
	cpu0 := a31CPU()
	cut.setDown(true)
	const window = 3 * timeout // past the session's expiry
	time.Sleep(window)
	cpu := a31CPU() - cpu0
	logs := n.Load() - logs0
	t.Logf("unreachable for %v: CPU %v, %d log records (last %v)", window, cpu, logs, last.Load())
	if cpu > window/10 {
		t.Errorf("idle Locker used %v CPU in %v with its server unreachable", cpu, window)
	}
	if logs > 50 {
		t.Errorf("idle Locker logged %d records in %v with its server unreachable", logs, window)
	}
	cut.setDown(false)
	time.Sleep(timeout) // reconnect, new session or not
	took := lockUnlock(t, l, "audit31-idle-down")
	t.Logf("Lock after the server came back took %v", took)
	// after that, an idle spell, then a prompt grant
	time.Sleep(timeout)
	if took := lockUnlock(t, l, "audit31-idle-down"); took > reportLag(timeout)/2 {
		t.Errorf("Lock after an idle spell following the outage took %v", took)
	}
}
