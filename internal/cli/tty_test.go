package cli

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// ioctl makes the ioctl(2) call req on fd with the argument arg points to.
func ioctl(fd uintptr, req uintptr, arg unsafe.Pointer) error {
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, fd, req, uintptr(arg)); errno != 0 {
		return errno
	}
	return nil
}

// openPTY returns the two ends of a new pseudo-terminal.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	var unlock int32
	if err := ioctl(m.Fd(), syscall.TIOCSPTLCK, unsafe.Pointer(&unlock)); err != nil {
		m.Close()
		t.Skipf("unlocking the pty: %v", err)
	}
	var n uint32
	if err := ioctl(m.Fd(), syscall.TIOCGPTN, unsafe.Pointer(&n)); err != nil {
		m.Close()
		t.Skipf("pty number: %v", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		t.Skipf("opening the pty: %v", err)
	}
	t.Cleanup(func() { m.Close(); s.Close() })
	return m, s
}

// TestWaitingLine: with stderr on a terminal, a waiting dlock run shows
// what it waits for and for how long, redrawn in place; on a pipe it does
// not.
func TestWaitingLine(t *testing.T) {
	b := realBackend(t)
	release := holdKey(t, b.url, "tty")
	defer release()

	master, slave := openPTY(t)
	dir := t.TempDir()
	cmd := dlockCmd(t, "ran", dir, "run", "-url", b.url, "-wait", "1500ms", "tty", "--", self(t))
	cmd.Stderr = slave
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close() // dlock has it; the master then reads EOF (EIO) when dlock exits
	var out bytes.Buffer
	copied := make(chan struct{})
	go func() { io.Copy(&out, master); close(copied) }()
	errc := make(chan error, 1)
	go func() { errc <- cmd.Wait() }()
	select {
	case <-errc:
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		t.Fatal("dlock did not end within a minute")
	}
	select {
	case <-copied:
	case <-time.After(5 * time.Second):
	}
	if code := cmd.ProcessState.ExitCode(); code != exitConflict {
		t.Errorf("exit %d, want %d; terminal output: %q", code, exitConflict, out.String())
	}
	text := out.String()
	want := fmt.Sprintf("%swaiting for lock %q on %s: ", clearLine, "tty", backendName(b.url))
	if n := strings.Count(text, want); n < 3 {
		t.Errorf("the waiting line was drawn %d times in 1.5s, want it redrawn several times; terminal output: %q", n, text)
	}
	// The elapsed times shown grow, up to about the 1.5s wait.
	var shown []float64
	for _, m := range regexp.MustCompile(`: (\d+\.\d)s \(gives up after 1\.5s\)`).FindAllStringSubmatch(text, -1) {
		f, _ := strconv.ParseFloat(m[1], 64)
		shown = append(shown, f)
	}
	if len(shown) < 3 || !slices.IsSorted(shown) || shown[len(shown)-1] < 0.8 {
		t.Errorf("elapsed times shown: %v; want increasing, up to at least 0.8s; terminal output: %q", shown, text)
	}
	if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
		t.Errorf("the command ran")
	}

	// The same on a pipe: no waiting line.
	r := runDlock(t, "ran", dir, "run", "-url", b.url, "-wait", "500ms", "tty", "--", self(t))
	if r.code != exitConflict || strings.Contains(r.stderr, "waiting for lock") {
		t.Errorf("on a pipe: %v", r)
	}
}

// TestWaitingLog: with stderr not a terminal (cron, CI), a waiting
// dlock run -v logs a record every few seconds saying what it waits for
// and how long it has waited; without -v it says nothing until it ends.
func TestWaitingLog(t *testing.T) {
	b := realBackend(t)
	release := holdKey(t, b.url, "waitlog")
	defer release()
	dir := t.TempDir()
	r := runDlock(t, "ran", dir, "run", "-url", b.url, "-wait", "5800ms", "-v", "waitlog", self(t))
	if r.code != exitConflict {
		t.Errorf("%v; want exit %d", r, exitConflict)
	}
	want := regexp.MustCompile(`level=INFO msg="dlock: waiting for lock \\"waitlog\\"" key=waitlog waited=5s backend=` + regexp.QuoteMeta(backendName(b.url)) + ` gives_up_after=5.8s holder="exclusive [0-9a-f]{32}, [0-9.]+m?s left"\n`)
	if n := len(want.FindAllString(r.stderr, -1)); n != 1 {
		t.Errorf("%d waiting records after 5s of a 5.8s wait, want 1 matching %v; stderr:\n%s", n, want, r.stderr)
	}
	if strings.Contains(r.stderr, clearLine) {
		t.Errorf("a terminal's waiting line on a pipe: %q", r.stderr)
	}
	r = runDlock(t, "ran", dir, "run", "-url", b.url, "-wait", "5500ms", "waitlog", self(t))
	if r.code != exitConflict || strings.Contains(r.stderr, "waiting") {
		t.Errorf("without -v: %v; want exit %d and no waiting record", r, exitConflict)
	}
}

func TestProgressEvery(t *testing.T) {
	var at []time.Duration
	for d := time.Duration(0); d < 3*time.Minute; d += progressEvery(d) {
		at = append(at, d)
	}
	// 0 (the start), every 5s to a minute, then every 30s.
	if len(at) != 1+12+3 || at[1] != 5*time.Second || at[12] != time.Minute || at[13] != 90*time.Second {
		t.Errorf("records at %v", at[1:])
	}
}
