package main

import (
	"context"
	"io"
	"net/rpc"
	"net/rpc/jsonrpc"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/harness/containers"
	"github.com/dlock-go/dlock/internal/testsupport/testserver/containerrpc"
)

// The tests run this test binary as the helper: with envRunMain set it is
// the helper, main and all.
const envRunMain = "DLOCK_CONTAINERS_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(envRunMain) != "" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func redisImage() string {
	if v := strings.TrimSpace(os.Getenv("DLOCK_REDIS_IMAGE")); v != "" {
		return v
	}
	return "redis:7.0"
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// checker is the test's own connection to the engine, to look at the
// helper's containers; it skips the test without an engine or image.
func checker(t *testing.T) *containers.Engine {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a Docker engine")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := containers.Connect(ctx, containers.Options{})
	if err != nil {
		t.Skipf("no Docker engine answers: %v", err)
	}
	if err := e.EnsureImage(ctx, redisImage(), "DLOCK_REDIS_IMAGE"); err != nil {
		t.Skipf("no image: %v", err)
	}
	return e
}

type helper struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	cli    *rpc.Client
	stderr strings.Builder
	done   chan struct{}
}

func startHelper(t *testing.T) *helper {
	t.Helper()
	h := &helper{done: make(chan struct{})}
	h.cmd = exec.Command(os.Args[0])
	h.cmd.Env = append(os.Environ(), envRunMain+"=1", "DLOCK_TESTSERVER_DEBUG=1")
	h.cmd.Stderr = &h.stderr
	var err error
	h.stdin, err = h.cmd.StdinPipe()
	must(t, err)
	stdout, err := h.cmd.StdoutPipe()
	must(t, err)
	must(t, h.cmd.Start())
	go func() {
		h.cmd.Wait()
		close(h.done)
	}()
	t.Cleanup(func() {
		h.cmd.Process.Kill()
		<-h.done
		if t.Failed() {
			t.Logf("helper's stderr:\n%s", h.stderr.String())
		}
	})
	h.cli = rpc.NewClientWithCodec(jsonrpc.NewClientCodec(struct {
		io.Reader
		io.WriteCloser
	}{stdout, h.stdin}))
	return h
}

func (h *helper) call(t *testing.T, method string, args, reply any) {
	t.Helper()
	must(t, h.cli.Call(containerrpc.Service+"."+method, args, reply))
}

// runRedis has the helper create and start a Redis container listening on
// a unix socket only, and waits until it answers.
func (h *helper) runRedis(t *testing.T) string {
	t.Helper()
	var hello containerrpc.Hello
	h.call(t, "Hello", containerrpc.Empty{}, &hello)
	if hello.Protocol != containerrpc.Protocol || hello.PID != h.cmd.Process.Pid {
		t.Fatalf("hello %+v, want protocol %d, pid %d", hello, containerrpc.Protocol, h.cmd.Process.Pid)
	}
	h.call(t, "Connect", containerrpc.Empty{}, &containerrpc.Engine{})
	h.call(t, "Image", containerrpc.ImageArgs{Image: redisImage(), EnvVar: "DLOCK_REDIS_IMAGE"}, &containerrpc.Empty{})
	var c containerrpc.ID
	h.call(t, "Create", containerrpc.CreateArgs{
		Image:       redisImage(),
		Name:        "dlock-helper-test-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano()%1e6, 10),
		Entrypoint:  []string{"redis-server"},
		Cmd:         []string{"--port", "0", "--unixsocket", "/tmp/redis.sock"},
		Files:       []containerrpc.File{{Path: "/dlock/x", Data: []byte("x"), Mode: 0o644}},
		HostNetwork: true,
	}, &c)
	h.call(t, "Start", c, &containerrpc.Empty{})
	deadline := time.Now().Add(20 * time.Second)
	for {
		var r containerrpc.ExecReply
		h.call(t, "Exec", containerrpc.ExecArgs{ID: c.ID, Cmd: []string{"redis-cli", "-s", "/tmp/redis.sock", "ping"}}, &r)
		if r.ExitCode == 0 && strings.TrimSpace(r.Output) == "PONG" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no PONG: %+v", r)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var st containerrpc.State
	h.call(t, "State", c, &st)
	if !st.Found || !st.Running {
		t.Fatalf("state after start: %+v", st)
	}
	var logs containerrpc.Logs
	h.call(t, "Logs", containerrpc.LogsArgs{ID: c.ID, Lines: 10}, &logs)
	if !strings.Contains(logs.Text, "ready to accept connections") {
		t.Errorf("log tail lacks the ready line:\n%s", logs.Text)
	}
	return c.ID
}

func (h *helper) waitExit(t *testing.T) {
	t.Helper()
	select {
	case <-h.done:
	case <-time.After(time.Minute):
		t.Fatal("helper still running after a minute")
	}
}

func found(t *testing.T, e *containers.Engine, id string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := e.State(ctx, id)
	must(t, err)
	return st.Found
}

// When its standard input ends, as when the test binary exits or dies,
// the helper removes its containers and exits with status 0.
func TestEOFRemovesContainers(t *testing.T) {
	t.Parallel()
	e := checker(t)
	h := startHelper(t)
	id := h.runRedis(t)
	h.stdin.Close()
	h.waitExit(t)
	if !h.cmd.ProcessState.Success() {
		t.Errorf("helper exited with %v", h.cmd.ProcessState)
	}
	if found(t, e, id) {
		t.Errorf("container %.12s still there after the helper exited", id)
	}
	if !strings.Contains(h.stderr.String(), "removed 1 containers") {
		t.Errorf("helper's debug log lacks the removal:\n%s", h.stderr.String())
	}
}

// SIGTERM (testserver's parent-death signal on Linux) does the same.
func TestSIGTERMRemovesContainers(t *testing.T) {
	t.Parallel()
	e := checker(t)
	h := startHelper(t)
	id := h.runRedis(t)
	must(t, h.cmd.Process.Signal(syscall.SIGTERM))
	h.waitExit(t)
	if found(t, e, id) {
		t.Errorf("container %.12s still there after the helper's SIGTERM", id)
	}
}

// A helper killed outright leaves its container, labelled with its pid; the
// next helper's sweep (at its Connect) removes it. Not parallel: every
// Connect sweeps, the other tests' too.
func TestKilledHelperSwept(t *testing.T) {
	e := checker(t)
	h := startHelper(t)
	id := h.runRedis(t)
	must(t, h.cmd.Process.Kill())
	h.waitExit(t)
	if !found(t, e, id) {
		t.Skipf("container %.12s of the killed helper is gone already: another test binary's sweep was first", id)
	}
	next := startHelper(t)
	next.call(t, "Connect", containerrpc.Empty{}, &containerrpc.Engine{})
	if found(t, e, id) {
		t.Errorf("container %.12s of the killed helper (pid %d) survived the next helper's sweep", id, h.cmd.Process.Pid)
	}
}
