package testserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// containerSpec describes one server container.
type containerSpec struct {
	server     string // "redis-server", "memcached", "zookeeper"
	port       int    // client port on 127.0.0.1 (host network)
	image      string
	entrypoint []string // set explicitly: official and staged images differ
	cmd        []string
	files      []containerFile
	ready      func(ctx context.Context, addr string) error
	timeout    time.Duration // readiness deadline per start
}

type containerFile struct {
	path string
	data []byte
	mode int64
}

// containerNode is one server in a container. It implements Node: Pause and
// Resume freeze and thaw the container's cgroup, Kill is docker kill, Restart
// starts the same container again (same command, port and filesystem, so
// the same data), Stop is docker stop with a 5 second grace period.
type containerNode struct {
	name    string // "redis-server 127.0.0.1:port"
	addr    string
	image   string
	e       *dockerEngine
	ctr     *testcontainers.DockerContainer
	timeout time.Duration

	mu sync.Mutex // serializes the hooks

	readyMu sync.Mutex
	ready   func(ctx context.Context, addr string) error
}

func (n *containerNode) Addr() string { return n.addr }

func (n *containerNode) id() string { return n.ctr.GetContainerID() }

func (n *containerNode) probe(ctx context.Context) error {
	n.readyMu.Lock()
	ready := n.ready
	n.readyMu.Unlock()
	return ready(ctx, n.addr)
}

// setReady replaces the readiness probe used by later starts.
func (n *containerNode) setReady(ready func(ctx context.Context, addr string) error) {
	n.readyMu.Lock()
	n.ready = ready
	n.readyMu.Unlock()
}

// launch creates and starts a container for spec and waits until the server
// answers. Its removal is registered with lt before it starts, so a failed
// start leaves nothing behind. A server that could not bind its port (taken
// since FreePort chose it) fails with errAddrInUse.
func (e *dockerEngine) launch(lt Lifetime, spec containerSpec) (*containerNode, error) {
	addr := hostPort(spec.port)
	n := &containerNode{
		name:    spec.server + " " + addr,
		addr:    addr,
		image:   spec.image,
		e:       e,
		timeout: spec.timeout,
		ready:   spec.ready,
	}
	files := make([]testcontainers.ContainerFile, len(spec.files))
	for i, f := range spec.files {
		files[i] = testcontainers.ContainerFile{
			Reader: bytes.NewReader(f.data), ContainerFilePath: f.path, FileMode: f.mode,
		}
	}
	req := testcontainers.GenericContainerRequest{
		ContainerRequest: testcontainers.ContainerRequest{
			Image:      spec.image,
			Name:       fmt.Sprintf("dlock-%s-%d-%s", spec.server, spec.port, randomHex(3)),
			Entrypoint: spec.entrypoint,
			Cmd:        spec.cmd,
			// A copy: testcontainers adds its own labels to the map, and
			// nodes of a cluster are launched at once.
			Labels:     maps.Clone(e.labels),
			Files:      files,
			WaitingFor: probeStrategy{n},
			HostConfigModifier: func(hc *container.HostConfig) {
				hc.NetworkMode = "host"
			},
		},
		Logger: tcLogger(lt),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute+spec.timeout)
	defer cancel()
	c, err := testcontainers.GenericContainer(ctx, req)
	if c != nil {
		n.ctr = c.(*testcontainers.DockerContainer)
		lt.Cleanup(func() {
			if f, ok := lt.(interface{ Failed() bool }); ok && f.Failed() {
				lt.Logf("testserver: %s log tail (container %.12s, %s):\n%s", n.name, n.id(), n.image, n.LogTail(1500))
			}
			n.remove()
		})
	}
	if err != nil {
		return nil, fmt.Errorf("testserver: %s: create container from %s: %w", n.name, spec.image, err)
	}
	if err := n.start(ctx); err != nil {
		return nil, err
	}
	lt.Logf("testserver: %s runs in container %.12s (%s)", n.name, n.id(), n.image)
	return n, nil
}

// start starts the (created or exited) container and waits until it is
// ready; on failure the container is killed and the error carries its log.
func (n *containerNode) start(ctx context.Context) error {
	err := n.ctr.Start(ctx)
	if err == nil {
		return nil
	}
	tail := n.LogTail(2048)
	n.kill()
	err = fmt.Errorf("testserver: %s (container %.12s, %s): %w; log:\n%s", n.name, n.id(), n.image, err, tail)
	if strings.Contains(tail, "Address already in use") {
		err = fmt.Errorf("%w: %w", errAddrInUse, err)
	} else if n.e.desktop && !strings.Contains(err.Error(), "exited") {
		err = fmt.Errorf("%w\n(Docker Desktop: the provider uses host networking; enable it under Settings > Resources > Network, Docker Desktop 4.34 or later)", err)
	}
	return err
}

// probeStrategy is the readiness wait: the kind's probe (PING, version,
// srvr) from the host, until it succeeds, the container exits, or the
// node's timeout passes.
type probeStrategy struct{ n *containerNode }

func (s probeStrategy) WaitUntilReady(ctx context.Context, target wait.StrategyTarget) error {
	ctx, cancel := context.WithTimeout(ctx, s.n.timeout)
	defer cancel()
	for {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		last := s.n.probe(pctx)
		pcancel()
		if last == nil {
			return nil
		}
		if st, err := target.State(ctx); err == nil && !st.Running {
			return fmt.Errorf("server exited during startup (exit code %d)", st.ExitCode)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready after %v (last probe: %v)", s.n.timeout, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func hookCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 30*time.Second)
}

func (n *containerNode) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("testserver: %s (container %.12s): %s: %w", n.name, n.id(), op, err)
}

// state returns the container's state.
func (n *containerNode) state(ctx context.Context) (*container.State, error) {
	r, err := n.e.cli.ContainerInspect(ctx, n.id(), client.ContainerInspectOptions{})
	if err != nil {
		return nil, err
	}
	if r.Container.State == nil {
		return nil, errors.New("no state in inspect reply")
	}
	return r.Container.State, nil
}

// Pause freezes every process of the container (docker pause, the cgroup
// freezer); it returns once they are frozen. The kernel still accepts
// connections on the host's loopback, nothing answers.
func (n *containerNode) Pause() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	ctx, cancel := hookCtx()
	defer cancel()
	defer n.e.cli.Close()
	_, err := n.e.cli.ContainerPause(ctx, n.id(), client.ContainerPauseOptions{})
	return n.wrap("docker pause", err)
}

// Resume thaws a paused container (docker unpause).
func (n *containerNode) Resume() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	ctx, cancel := hookCtx()
	defer cancel()
	defer n.e.cli.Close()
	_, err := n.e.cli.ContainerUnpause(ctx, n.id(), client.ContainerUnpauseOptions{})
	return n.wrap("docker unpause", err)
}

// Kill sends SIGKILL (docker kill; a paused container is thawed by the
// engine so the signal lands) and waits until the container has exited.
// Killing a container that is not running is not an error.
func (n *containerNode) Kill() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.kill()
}

func (n *containerNode) kill() error {
	ctx, cancel := hookCtx()
	defer cancel()
	defer n.e.cli.Close()
	st, err := n.state(ctx)
	if err != nil {
		return n.wrap("inspect", err)
	}
	if !st.Running {
		return nil
	}
	if _, err := n.e.cli.ContainerKill(ctx, n.id(), client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		if st, serr := n.state(ctx); serr == nil && !st.Running {
			return nil // exited on its own meanwhile
		}
		return n.wrap("docker kill", err)
	}
	return n.waitExited(ctx)
}

func (n *containerNode) waitExited(ctx context.Context) error {
	for {
		st, err := n.state(ctx)
		if err != nil {
			return n.wrap("inspect", err)
		}
		if !st.Running {
			return nil
		}
		select {
		case <-ctx.Done():
			return n.wrap("kill", fmt.Errorf("still running: %w", ctx.Err()))
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Restart kills the container if it runs, starts it again (docker start:
// same command line, port and filesystem) and waits until it is ready.
func (n *containerNode) Restart() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.kill(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second+n.timeout)
	defer cancel()
	defer n.e.cli.Close()
	return n.start(ctx)
}

// Stop stops the container gracefully (docker stop: SIGTERM, SIGKILL after
// 5 seconds; a paused container is thawed by the engine first).
func (n *containerNode) Stop() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	ctx, cancel := hookCtx()
	defer cancel()
	defer n.e.cli.Close()
	timeout := 5
	_, err := n.e.cli.ContainerStop(ctx, n.id(), client.ContainerStopOptions{Timeout: &timeout})
	if err != nil {
		return n.wrap("docker stop", err)
	}
	return n.waitExited(ctx)
}

// remove kills and removes the container with its anonymous volumes.
func (n *containerNode) remove() {
	ctx, cancel := hookCtx()
	defer cancel()
	defer n.e.cli.Close()
	n.e.cli.ContainerRemove(ctx, n.id(), client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
}

// LogTail returns about the last n bytes of the container's output (the
// server logs to stdout and stderr).
func (n *containerNode) LogTail(size int) string {
	ctx, cancel := hookCtx()
	defer cancel()
	defer n.e.cli.Close()
	rc, err := n.e.cli.ContainerLogs(ctx, n.id(), client.ContainerLogsOptions{
		ShowStdout: true, ShowStderr: true, Tail: "400",
	})
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer rc.Close()
	var buf bytes.Buffer
	if _, err := stdcopy.StdCopy(&buf, &buf, rc); err != nil && buf.Len() == 0 {
		return fmt.Sprintf("(no log: %v)", err)
	}
	s := buf.String()
	if len(s) > size {
		s = s[len(s)-size:]
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			s = s[i+1:]
		}
	}
	return s
}
