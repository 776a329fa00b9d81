package testserver

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver/containerrpc"
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
// the same data), Stop is docker stop with a 5 second grace period. Each is
// a call to the container helper; readiness is probed from here.
type containerNode struct {
	name    string // "redis-server 127.0.0.1:port"
	addr    string
	image   string
	cid     string // container ID
	e       *dockerEngine
	timeout time.Duration

	mu sync.Mutex // serializes the hooks

	readyMu sync.Mutex
	ready   func(ctx context.Context, addr string) error
}

func (n *containerNode) Addr() string { return n.addr }

func (n *containerNode) id() string { return n.cid }

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

// call calls the helper's method on this node's container.
func (n *containerNode) call(method string, reply any) error {
	if reply == nil {
		reply = &containerrpc.Empty{}
	}
	return n.e.h.call(method, containerrpc.ID{ID: n.cid}, reply)
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
	files := make([]containerrpc.File, len(spec.files))
	for i, f := range spec.files {
		files[i] = containerrpc.File{Path: f.path, Data: f.data, Mode: f.mode}
	}
	var created containerrpc.ID
	err := e.h.call("Create", containerrpc.CreateArgs{
		Image:       spec.image,
		Name:        fmt.Sprintf("dlock-%s-%d-%s", spec.server, spec.port, randomHex(3)),
		Entrypoint:  spec.entrypoint,
		Cmd:         spec.cmd,
		Files:       files,
		HostNetwork: true,
	}, &created)
	if err != nil {
		return nil, fmt.Errorf("testserver: %s: create container from %s: %w", n.name, spec.image, err)
	}
	n.cid = created.ID
	lt.Cleanup(func() {
		if f, ok := lt.(interface{ Failed() bool }); ok && f.Failed() {
			lt.Logf("testserver: %s log tail (container %.12s, %s):\n%s", n.name, n.id(), n.image, n.LogTail(1500))
		}
		n.remove()
	})
	if err := n.start(); err != nil {
		return nil, err
	}
	lt.Logf("testserver: %s runs in container %.12s (%s)", n.name, n.id(), n.image)
	return n, nil
}

// start starts the (created or exited) container and waits until it is
// ready; on failure the container is killed and the error carries its log.
func (n *containerNode) start() error {
	err := n.call("Start", nil)
	if err == nil {
		err = n.waitReady()
	}
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

// waitReady probes the server (PING, version, srvr) from the host until it
// answers, the container exits, or the node's timeout passes.
func (n *containerNode) waitReady() error {
	ctx, cancel := context.WithTimeout(context.Background(), n.timeout)
	defer cancel()
	for {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		last := n.probe(pctx)
		pcancel()
		if last == nil {
			return nil
		}
		var st containerrpc.State
		if err := n.call("State", &st); err == nil && !st.Running {
			return fmt.Errorf("server exited during startup (exit code %d)", st.ExitCode)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready after %v (last probe: %v)", n.timeout, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (n *containerNode) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("testserver: %s (container %.12s): %s: %w", n.name, n.id(), op, err)
}

// Pause freezes every process of the container (docker pause, the cgroup
// freezer); it returns once they are frozen. The kernel still accepts
// connections on the host's loopback, nothing answers.
func (n *containerNode) Pause() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.wrap("pause", n.call("Pause", nil))
}

// Resume thaws a paused container (docker unpause).
func (n *containerNode) Resume() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.wrap("resume", n.call("Unpause", nil))
}

// Kill sends SIGKILL (docker kill; a paused container is thawed by the
// engine so the signal lands) and waits until the container has exited.
// Killing a container that is not running is not an error.
func (n *containerNode) Kill() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.kill()
}

func (n *containerNode) kill() error { return n.wrap("kill", n.call("Kill", nil)) }

// Restart kills the container if it runs, starts it again (docker start:
// same command line, port and filesystem) and waits until it is ready.
func (n *containerNode) Restart() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.kill(); err != nil {
		return err
	}
	return n.start()
}

// Stop stops the container gracefully (docker stop: SIGTERM, SIGKILL after
// 5 seconds; a paused container is thawed by the engine first) and waits
// until it has exited.
func (n *containerNode) Stop() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.wrap("stop", n.call("Stop", nil))
}

// remove kills and removes the container with its anonymous volumes (on
// failure, the helper removes it when it exits).
func (n *containerNode) remove() { n.call("Remove", nil) }

// LogTail returns about the last size bytes of the container's output (the
// server logs to stdout and stderr).
func (n *containerNode) LogTail(size int) string {
	var logs containerrpc.Logs
	if err := n.e.h.call("Logs", containerrpc.LogsArgs{ID: n.cid, Lines: 400}, &logs); err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	s := logs.Text
	if len(s) > size {
		s = s[len(s)-size:]
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			s = s[i+1:]
		}
	}
	return s
}
