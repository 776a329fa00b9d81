package containers

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// These tests need a Docker engine and the Redis image (redis:7.0, or
// DLOCK_REDIS_IMAGE; `make images` builds it offline); they skip without
// them. The servers they start listen on a unix socket only, so they take
// no port.

func redisImage() string {
	if v := strings.TrimSpace(os.Getenv("DLOCK_REDIS_IMAGE")); v != "" {
		return v
	}
	return "redis:7.0"
}

// connect returns an Engine, closed when the test ends, or skips.
func connect(t *testing.T) *Engine {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a Docker engine")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var opts Options
	if os.Getenv("DLOCK_TESTSERVER_DEBUG") != "" {
		opts.Logf = t.Logf
	}
	e, err := Connect(ctx, opts)
	if err != nil {
		t.Skipf("no Docker engine answers: %v", err)
	}
	if err := e.EnsureImage(ctx, redisImage(), "DLOCK_REDIS_IMAGE"); err != nil {
		t.Skipf("no image: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		e.Close(ctx)
	})
	return e
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func redisSpec(name string) Spec {
	return Spec{
		Image:       redisImage(),
		Name:        name + "-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano()%1e6, 10),
		Entrypoint:  []string{"redis-server"},
		Cmd:         []string{"/dlock/redis.conf"},
		Files:       []File{{Path: "/dlock/redis.conf", Data: []byte("port 0\nunixsocket /tmp/redis.sock\n"), Mode: 0o644}},
		HostNetwork: true,
	}
}

// waitPong waits until the server in id answers PING on its socket.
func waitPong(t *testing.T, e *Engine, id string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, out, err := e.Exec(ctx(t), id, []string{"redis-cli", "-s", "/tmp/redis.sock", "ping"})
		if err == nil && code == 0 && strings.TrimSpace(out) == "PONG" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no PONG from %.12s: exit %d, %q, %v", id, code, out, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func state(t *testing.T, e *Engine, id string) State {
	t.Helper()
	st, err := e.State(ctx(t), id)
	must(t, err)
	return st
}

func TestContainer(t *testing.T) {
	t.Parallel()
	e := connect(t)
	spec := redisSpec("dlock-containers-test")
	spec.Labels = map[string]string{"org.dlock.test": "yes", LabelPID: "1"} // the engine's own labels win
	id, err := e.Create(ctx(t), spec)
	must(t, err)
	if st := state(t, e, id); !st.Found || st.Running || st.Status != "created" {
		t.Errorf("state after create: %+v", st)
	}

	c, err := e.Inspect(ctx(t), id)
	must(t, err)
	if c.HostConfig == nil || c.HostConfig.NetworkMode != "host" {
		t.Errorf("network mode %+v, want host", c.HostConfig)
	}
	if c.Config.Image != spec.Image {
		t.Errorf("image %q, want %q", c.Config.Image, spec.Image)
	}
	host, _ := os.Hostname()
	for k, want := range map[string]string{
		LabelOwner: "1", LabelPID: strconv.Itoa(os.Getpid()), LabelHost: host, "org.dlock.test": "yes",
	} {
		if got := c.Config.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q (labels %v)", k, got, want, c.Config.Labels)
		}
	}
	if !slices.Equal(c.Config.Entrypoint, spec.Entrypoint) || !slices.Equal(c.Config.Cmd, spec.Cmd) {
		t.Errorf("entrypoint %q cmd %q, want %q %q", c.Config.Entrypoint, c.Config.Cmd, spec.Entrypoint, spec.Cmd)
	}

	must(t, e.Start(ctx(t), id))
	waitPong(t, e, id)
	if st := state(t, e, id); !st.Running || st.Paused {
		t.Errorf("state after start: %+v", st)
	}
	// The staged images have no cat: ask the server what it read.
	code, out, err := e.Exec(ctx(t), id, []string{"redis-cli", "-s", "/tmp/redis.sock", "config", "get", "port"})
	if f := strings.Fields(out); err != nil || code != 0 || len(f) != 2 || f[1] != "0" {
		t.Errorf("the written config's port: exit %d, %q, %v", code, out, err)
	}
	code, out, err = e.Exec(ctx(t), id, []string{"redis-cli", "-s", "/nowhere.sock", "ping"})
	if err != nil || code == 0 || out == "" {
		t.Errorf("failing exec: exit %d, %q, %v; want a non-zero exit code and output", code, out, err)
	}
	logs, err := e.Logs(ctx(t), id, 400)
	must(t, err)
	if !strings.Contains(logs, "ready to accept connections") {
		t.Errorf("logs lack the ready line:\n%s", logs)
	}

	must(t, e.Pause(ctx(t), id))
	if st := state(t, e, id); !st.Running || !st.Paused {
		t.Errorf("state after pause: %+v", st)
	}
	must(t, e.Unpause(ctx(t), id))
	waitPong(t, e, id)

	must(t, e.Pause(ctx(t), id))
	must(t, e.Kill(ctx(t), id)) // a paused container is killed too
	if st := state(t, e, id); st.Running || st.ExitCode != 137 {
		t.Errorf("state after kill: %+v, want exited with 137", st)
	}
	must(t, e.Kill(ctx(t), id)) // not running: no error

	must(t, e.Start(ctx(t), id)) // the same container again
	waitPong(t, e, id)
	start := time.Now()
	must(t, e.Stop(ctx(t), id))
	if st := state(t, e, id); st.Running {
		t.Errorf("state after stop: %+v", st)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("stop took %v: redis exits on SIGTERM", d)
	}

	must(t, e.Remove(ctx(t), id))
	if st := state(t, e, id); st.Found {
		t.Errorf("state after remove: %+v, want not found", st)
	}
	must(t, e.Remove(ctx(t), id)) // gone: no error
	if err := e.Start(ctx(t), id); err == nil {
		t.Error("started a removed container")
	}
}

// Close removes every container the engine created, running or not, and
// later creates fail.
func TestClose(t *testing.T) {
	t.Parallel()
	e := connect(t)
	running, err := e.Create(ctx(t), redisSpec("dlock-close-test-running"))
	must(t, err)
	must(t, e.Start(ctx(t), running))
	created, err := e.Create(ctx(t), redisSpec("dlock-close-test-created"))
	must(t, err)

	removed := e.Close(ctx(t))
	slices.Sort(removed)
	want := []string{running, created}
	slices.Sort(want)
	if !slices.Equal(removed, want) {
		t.Errorf("Close removed %q, want %q", removed, want)
	}
	for _, id := range want {
		if st := state(t, e, id); st.Found {
			t.Errorf("container %.12s after Close: %+v", id, st)
		}
	}
	if _, err := e.Create(ctx(t), redisSpec("dlock-close-test-late")); !errors.Is(err, ErrClosed) {
		t.Errorf("Create after Close: %v, want ErrClosed", err)
	}
}

// The containers of a dead owner on this host are removed by the sweep;
// a live owner's stay. The test's containers name a host of their own, so
// that no other test binary's sweep touches them.
func TestSweep(t *testing.T) {
	t.Parallel()
	e := connect(t)
	host := "dlock-sweep-test-" + strconv.Itoa(os.Getpid())
	e.labels[LabelHost] = host
	dead := exec.Command("true")
	must(t, dead.Run())
	labels := e.Labels()
	labels[LabelPID] = strconv.Itoa(dead.Process.Pid)
	defer e.cli.Close()
	orphan, err := e.cli.ContainerCreate(ctx(t), client.ContainerCreateOptions{
		Config: &container.Config{Image: redisImage(), Labels: labels},
		Name:   host + "-orphan",
	})
	must(t, err)
	t.Cleanup(func() {
		e.cli.ContainerRemove(context.Background(), orphan.ID, client.ContainerRemoveOptions{Force: true})
	})
	live, err := e.Create(ctx(t), redisSpec(host+"-live"))
	must(t, err)
	must(t, e.Start(ctx(t), live))

	if removed := e.Sweep(ctx(t)); !slices.Equal(removed, []string{orphan.ID}) {
		t.Errorf("sweep removed %q, want the dead pid %d's container %.12s only", removed, dead.Process.Pid, orphan.ID)
	}
	if st := state(t, e, orphan.ID); st.Found {
		t.Errorf("container of dead pid %d survived the sweep: %+v", dead.Process.Pid, st)
	}
	if st := state(t, e, live); !st.Running {
		t.Errorf("a live owner's container after the sweep: %+v", st)
	}
}
