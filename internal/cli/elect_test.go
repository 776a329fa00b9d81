package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestElect: two dlock elect of one name on a real server: the second's
// command starts only once the first's exits (its resignation), in a
// higher term, given as DLOCK_TERM and DLOCK_TOKEN.
func TestElect(t *testing.T) {
	b := realBackend(t)
	dirA, dirB := t.TempDir(), t.TempDir()
	a := dlockCmd(t, "term", dirA, "elect", "-url", b.url, "-announce", "a:1", "scheduler", "--", self(t))
	sa := start(t, a)
	termA := terms(t, waitFile(t, filepath.Join(dirA, "ready"), 15*time.Second))
	bc := dlockCmd(t, "term", dirB, "elect", "-url", b.url, "scheduler", "--", self(t))
	sb := start(t, bc)
	time.Sleep(500 * time.Millisecond)
	if _, err := os.Stat(filepath.Join(dirB, "ready")); err == nil {
		t.Fatal("B's command runs while A leads")
	}
	os.WriteFile(filepath.Join(dirA, "release"), []byte("x"), 0o644)
	if r := finish(t, a, sa); r.code != 0 {
		t.Fatalf("A: %v", r)
	}
	termB := terms(t, waitFile(t, filepath.Join(dirB, "ready"), 15*time.Second))
	if termB <= termA {
		t.Errorf("B's term %d is not above A's %d", termB, termA)
	}
	os.WriteFile(filepath.Join(dirB, "release"), []byte("x"), 0o644)
	if r := finish(t, bc, sb); r.code != 0 {
		t.Fatalf("B: %v", r)
	}
}

// terms parses a "term" helper's ready line, DLOCK_TERM and DLOCK_TOKEN,
// which must agree.
func terms(t *testing.T, line string) uint64 {
	t.Helper()
	var term, token uint64
	if _, err := fmt.Sscan(line, &term, &token); err != nil || term == 0 || term != token {
		t.Fatalf("the command saw DLOCK_TERM and DLOCK_TOKEN %q; want the same non-zero term (%v)", line, err)
	}
	return term
}

// TestElectLostTerm: a term deleted behind dlock's back stops the command
// (SIGTERM) and dlock exits 124; with -again it campaigns again, runs the
// command in a new term, and forwards a signal to it as dlock run does.
func TestElectLostTerm(t *testing.T) {
	b := realBackend(t)
	for _, again := range []bool{false, true} {
		t.Run(fmt.Sprint("again=", again), func(t *testing.T) {
			dir := t.TempDir()
			name := fmt.Sprint("leader-", again)
			args := []string{"elect", "-url", b.url, "-ttl", "2s", "-grace", "1s"}
			if again {
				args = append(args, "-again")
			}
			cmd := dlockCmd(t, "trap", dir, append(args, name, "--", self(t))...)
			s := start(t, cmd)
			waitFile(t, filepath.Join(dir, "ready"), 15*time.Second)
			if err := b.deleteKey(context.Background(), name); err != nil {
				t.Fatal(err)
			}
			if !again {
				if r := finish(t, cmd, s); r.code != exitLost || !strings.Contains(r.stderr, "lost") {
					t.Fatalf("%v; want exit %d and a dlock: line about the lost term", r, exitLost)
				}
				return
			}
			for deadline := time.Now().Add(15 * time.Second); strings.Count(readOptional(filepath.Join(dir, "ready")), "\n") < 2; time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("the command did not run again after the lost term; stderr:\n%s", s.stderr)
				}
			}
			cmd.Process.Signal(syscall.SIGTERM)
			if r := finish(t, cmd, s); r.code != 3 {
				t.Fatalf("%v; want the command's own exit 3 after the forwarded SIGTERM", r)
			}
			if n := strings.Count(readFile(t, filepath.Join(dir, "signals")), "SIGTERM"); n != 2 {
				t.Errorf("the commands saw %d SIGTERMs; want 2 (the lost term's, then the forwarded one)", n)
			}
		})
	}
}
