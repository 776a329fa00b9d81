package cli

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"slices"
)

// freezer is a TCP proxy to addr that can stop forwarding (both ways)
// while keeping every connection open: a leader cut off from its server.
type freezer struct {
	addr   string
	mu     sync.Mutex
	frozen bool
}

func newFreezer(t *testing.T, to string) *freezer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	f := &freezer{addr: ln.Addr().String()}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", to)
			if err != nil {
				c.Close()
				continue
			}
			t.Cleanup(func() { c.Close(); s.Close() })
			go f.pipe(c, s)
			go f.pipe(s, c)
		}
	}()
	return f
}

func (f *freezer) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		for f.isFrozen() {
			time.Sleep(10 * time.Millisecond)
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				return
			}
			return
		}
	}
}

func (f *freezer) freeze() { f.mu.Lock(); f.frozen = true; f.mu.Unlock() }
func (f *freezer) isFrozen() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.frozen
}

// TestAudit42ElectNoOverlap: dlock elect says that when the term is lost
// the command is stopped "before any other candidate can be elected". A
// leader cut off from its server (renewals unanswered) whose command
// takes its -grace to stop must not still run when another dlock elect's
// command starts in the next term.
func TestAudit42ElectNoOverlap(t *testing.T) {
	if !slices.Contains(lock.Schemes(), "redisnx") {
		t.Skip("no redisnx in this binary")
	}
	srv := testserver.StartRedis(t, nil)
	px := newFreezer(t, srv.Addr())
	dirA, dirB := t.TempDir(), t.TempDir()
	a := dlockCmd(t, "ignore-term", dirA, "elect", "-url", "redisnx://"+px.addr, "-ttl", "2s", "-grace", "3s", "sched", "--", self(t))
	sa := start(t, a)
	pidA := strings.TrimSpace(waitFile(t, filepath.Join(dirA, "ready"), 15*time.Second))
	b := dlockCmd(t, "term", dirB, "elect", "-url", "redisnx://"+srv.Addr(), "-ttl", "2s", "sched", "--", self(t))
	sb := start(t, b)
	time.Sleep(300 * time.Millisecond)
	px.freeze()
	waitFile(t, filepath.Join(dirB, "ready"), 20*time.Second)
	var pid int
	if _, err := fmtSscan(pidA, &pid); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("B's command runs in the next term while A's command (pid %d) still runs; A's signals: %q",
			pid, readOptional(filepath.Join(dirA, "signals")))
	}
	os.WriteFile(filepath.Join(dirB, "release"), []byte("x"), 0o644)
	if r := finish(t, b, sb); r.code != 0 {
		t.Errorf("B: %v", r)
	}
	if r := finish(t, a, sa); r.code != exitLost {
		t.Errorf("A: %v; want exit %d", r, exitLost)
	}
}

func fmtSscan(s string, p *int) (int, error) { return fmt.Sscan(s, p) }

// A dlock elect that gets SIGTERM while it campaigns exits 128+15 and
// never runs its command, even once the leader resigns; and its
// campaign leaves nothing queued: the next candidate is elected at once.
func TestAudit42ElectCancelled(t *testing.T) {
	b := realBackend(t)
	dirA, dirB, dirC := t.TempDir(), t.TempDir(), t.TempDir()
	a := dlockCmd(t, "hold", dirA, "elect", "-url", b.url, "sched", "--", self(t))
	sa := start(t, a)
	waitFile(t, filepath.Join(dirA, "ready"), 15*time.Second)
	bc := dlockCmd(t, "hold", dirB, "elect", "-url", b.url, "sched", "--", self(t))
	sb := start(t, bc)
	time.Sleep(500 * time.Millisecond)
	bc.Process.Signal(syscall.SIGTERM)
	if r := finish(t, bc, sb); r.code != 128+15 {
		t.Errorf("B: %v; want exit 143", r)
	}
	os.WriteFile(filepath.Join(dirA, "release"), []byte("x"), 0o644)
	if r := finish(t, a, sa); r.code != 0 {
		t.Fatalf("A: %v", r)
	}
	c := dlockCmd(t, "hold", dirC, "elect", "-url", b.url, "sched", "--", self(t))
	sc := start(t, c)
	waitFile(t, filepath.Join(dirC, "ready"), 5*time.Second)
	if _, err := os.Stat(filepath.Join(dirB, "ready")); err == nil {
		t.Error("B's command ran after its campaign was cancelled")
	}
	os.WriteFile(filepath.Join(dirC, "release"), []byte("x"), 0o644)
	if r := finish(t, c, sc); r.code != 0 {
		t.Errorf("C: %v", r)
	}
}
