package testserver

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/rpc"
	"net/rpc/jsonrpc"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver/containerrpc"
)

// The docker provider does not talk to the Docker engine itself: a helper
// process, dlock-containers (harness/cmd/dlock-containers, in the harness
// module, which uses testcontainers-go), does, and serves the few engine
// operations the provider needs over its standard input and output
// (containerrpc). So the main module needs neither testcontainers-go nor
// the Docker client, and neither does a user's go.sum.
//
// One helper serves a test binary: it is started on the first use of the
// docker provider, with the parent-death signal SIGTERM on Linux, and when
// its standard input ends (Main closes it after the shared servers'
// cleanups; otherwise it ends as the test binary or program exits or dies)
// it removes every container it created and exits.

// EnvContainersHelper names a built dlock-containers binary for the docker
// provider. Unset, testserver builds one from the repository it runs in.
const EnvContainersHelper = "DLOCK_CONTAINERS_HELPER"

// dlockModule is the main module's path; the helper is built from the
// harness module beside its go.mod.
const dlockModule = "github.com/dlock-go/dlock"

// containersHelper is a running helper and the RPC client talking to it.
type containersHelper struct {
	path   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	cli    *rpc.Client
	stderr *tailWriter
	done   chan struct{} // closed when the helper has exited
}

var helperState struct {
	mu     sync.Mutex
	h      *containersHelper
	err    error
	tried  bool
	closed bool
}

// getHelper returns the test binary's helper, finding or building it and
// starting it on first use.
func getHelper() (*containersHelper, error) {
	helperState.mu.Lock()
	defer helperState.mu.Unlock()
	if helperState.closed {
		return nil, errors.New("the container helper was stopped (Main has returned)")
	}
	if !helperState.tried {
		helperState.tried = true
		helperState.h, helperState.err = startHelper()
	}
	return helperState.h, helperState.err
}

// closeHelper closes the helper's standard input, which makes it remove any
// container left and exit, and waits for that (30 seconds at most). Main
// calls it after the shared servers' cleanups.
func closeHelper() {
	helperState.mu.Lock()
	h := helperState.h
	helperState.closed = true
	helperState.mu.Unlock()
	if h == nil {
		return
	}
	h.stdin.Close()
	select {
	case <-h.done:
	case <-time.After(30 * time.Second):
	}
}

// startHelper finds or builds the helper binary, starts it and checks that
// it speaks this protocol.
func startHelper() (*containersHelper, error) {
	path := os.Getenv(EnvContainersHelper)
	if path == "" {
		var err error
		if path, err = buildHelper(); err != nil {
			return nil, err
		}
	}
	h := &containersHelper{path: path, stderr: &tailWriter{max: 8 << 10}, done: make(chan struct{})}
	cmd := exec.Command(path)
	cmd.SysProcAttr = helperSysProcAttr()
	cmd.Stderr = h.stderr // a pipe, not the test binary's stderr: go test must not wait for the helper
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("container helper %s: %w", path, err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("container helper %s: %w", path, err)
	}
	if err := spawn(cmd); err != nil {
		return nil, fmt.Errorf("start container helper %s: %w", path, err)
	}
	h.cmd, h.stdin = cmd, stdin
	go func() {
		cmd.Wait()
		close(h.done)
	}()
	h.cli = rpc.NewClientWithCodec(jsonrpc.NewClientCodec(stdio{stdout, stdin}))
	var hello containerrpc.Hello
	if err := h.call("Hello", containerrpc.Empty{}, &hello); err != nil {
		stdin.Close()
		return nil, err
	}
	if hello.Protocol != containerrpc.Protocol {
		stdin.Close()
		return nil, fmt.Errorf("container helper %s speaks protocol %d, this testserver %d: rebuild it "+
			"(make bin/dlock-containers) or unset %s", path, hello.Protocol, containerrpc.Protocol, EnvContainersHelper)
	}
	return h, nil
}

type stdio struct {
	io.Reader
	io.WriteCloser
}

// call calls the helper's method (containerrpc.Service + "." + method). An
// error from the helper is returned as it is; a helper that died is
// reported with its exit status and the end of its standard error.
func (h *containersHelper) call(method string, args, reply any) error {
	err := h.cli.Call(containerrpc.Service+"."+method, args, reply)
	if err == nil {
		return nil
	}
	var se rpc.ServerError
	if errors.As(err, &se) {
		return errors.New(string(se))
	}
	select {
	case <-h.done:
		return fmt.Errorf("container helper %s exited (%v): %s: %w; its last words:\n%s",
			h.path, h.cmd.ProcessState, method, err, h.stderr.String())
	case <-time.After(time.Second):
		return fmt.Errorf("container helper %s: %s: %w", h.path, method, err)
	}
}

// buildHelper builds dlock-containers from the harness module of the
// repository the test runs in, into the user's cache directory, and
// returns its path. Each test binary builds it (go's build cache makes that
// quick once done) to a name of its own and renames it into place, so that
// concurrent test binaries do not clash.
func buildHelper() (string, error) {
	root, err := findRepoRoot()
	if err != nil {
		return "", fmt.Errorf("cannot build the container helper: %v; set %s to a dlock-containers binary "+
			"(cd harness && go build -o ../bin/dlock-containers ./cmd/dlock-containers)", err, EnvContainersHelper)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "dlock")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("container helper: %w", err)
	}
	sum := sha256.Sum256([]byte(root))
	final := filepath.Join(dir, "dlock-containers-"+hex.EncodeToString(sum[:6]))
	tmp := fmt.Sprintf("%s.tmp-%d-%s", final, os.Getpid(), randomHex(4))
	// go test puts its own go first on the test binary's PATH.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", tmp, "./cmd/dlock-containers")
	cmd.Dir = filepath.Join(root, "harness")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("cannot build the container helper (go build ./cmd/dlock-containers in %s: %v):\n%s\nset %s to a dlock-containers binary instead",
			cmd.Dir, err, bytes.TrimSpace(out.Bytes()), EnvContainersHelper)
	}
	if err := os.Rename(tmp, final); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("container helper: %w", err)
	}
	return final, nil
}

// findRepoRoot walks up from the working directory to dlock's repository:
// the directory whose go.mod declares the main module and which has the
// harness module (harness/go.mod) beside it.
func findRepoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if isRepoRoot(dir) {
			return dir, nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("no dlock repository (a go.mod of module %s with harness/go.mod beside it) at or above %s", dlockModule, wd)
		}
	}
}

func isRepoRoot(dir string) bool {
	f, err := os.Open(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	module := false
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 2 && fields[0] == "module" {
			module = strings.Trim(fields[1], `"`) == dlockModule
			break
		}
	}
	if !module {
		return false
	}
	_, err = os.Stat(filepath.Join(dir, "harness", "go.mod"))
	return err == nil
}

// tailWriter keeps the last max bytes written to it, and forwards them to
// the test binary's stderr when DLOCK_TESTSERVER_DEBUG is set.
type tailWriter struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (w *tailWriter) Write(p []byte) (int, error) {
	if os.Getenv(EnvDebug) != "" {
		os.Stderr.Write(p)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	if len(w.buf) > w.max {
		w.buf = append(w.buf[:0], w.buf[len(w.buf)-w.max:]...)
	}
	return len(p), nil
}

func (w *tailWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.buf)
}
