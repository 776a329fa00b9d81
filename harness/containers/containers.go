// Package containers is the container engine of dlock's test harness: the
// few Docker operations that testserver's "docker" provider needs, done
// with testcontainers-go. The helper command dlock-containers
// (harness/cmd/dlock-containers) serves them to test binaries, so that the
// main module never imports testcontainers-go, moby or containerd.
//
// An Engine creates containers without waiting for them to be ready (the
// caller probes its server from the host) and can start, pause, unpause,
// kill, stop, remove, inspect and exec into them. Every container it
// creates carries the labels LabelOwner, LabelPID (this process's pid) and
// LabelHost (this host's name); Connect removes the containers of owners on
// this host whose process is gone (see Sweep), and Close removes every
// container the Engine created.
//
// testcontainers-go's reaper (Ryuk) is switched off unless
// TESTCONTAINERS_RYUK_DISABLED is set: it needs an image from a registry.
package containers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tcexec "github.com/testcontainers/testcontainers-go/exec"
	tclog "github.com/testcontainers/testcontainers-go/log"
)

// Labels on every container an Engine creates.
const (
	LabelOwner = "org.dlock.testserver"      // "1"
	LabelPID   = "org.dlock.testserver.pid"  // the owner's pid
	LabelHost  = "org.dlock.testserver.host" // the owner's host name
)

// Options configure Connect.
type Options struct {
	// Logf, when set, receives testcontainers-go's log lines; without it
	// they are dropped.
	Logf func(format string, args ...any)
}

// Engine is a connection to the Docker engine and the set of containers
// created through it. Its methods may be called concurrently.
type Engine struct {
	cli     *testcontainers.DockerClient
	logger  tclog.Logger
	labels  map[string]string
	version string
	desktop bool
	swept   []string // removed by Connect's sweep

	images sync.Map // image name -> *imageCheck

	mu     sync.Mutex
	ctrs   map[string]*testcontainers.DockerContainer // created by this Engine, not removed yet
	closed bool
}

type imageCheck struct {
	once sync.Once
	err  error
}

// Connect connects to the Docker engine (DOCKER_HOST, the Docker context or
// the default socket, as the docker CLI does; the API version is negotiated,
// or pinned with DOCKER_API_VERSION) and sweeps the containers of dead
// owners on this host.
func Connect(ctx context.Context, opts Options) (e *Engine, err error) {
	if _, set := os.LookupEnv("TESTCONTAINERS_RYUK_DISABLED"); !set {
		os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
	}
	var logger tclog.Logger = tclog.NewNoopLogger()
	if opts.Logf != nil {
		logger = logfLogger(opts.Logf)
	}
	tclog.SetDefault(logger)
	defer func() {
		// testcontainers-go panics when it finds no Docker host at all.
		if r := recover(); r != nil {
			e, err = nil, fmt.Errorf("%v", r)
		}
	}()
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return nil, err
	}
	info, err := cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		cli.Close()
		return nil, err
	}
	host, _ := os.Hostname()
	e = &Engine{
		cli:     cli,
		logger:  logger,
		version: info.Info.ServerVersion,
		desktop: strings.Contains(info.Info.OperatingSystem, "Docker Desktop"),
		labels: map[string]string{
			LabelOwner: "1",
			LabelPID:   strconv.Itoa(os.Getpid()),
			LabelHost:  host,
		},
		ctrs: map[string]*testcontainers.DockerContainer{},
	}
	e.swept = e.Sweep(ctx)
	cli.Close() // idle connections only; the client stays usable
	return e, nil
}

type logfLogger func(format string, args ...any)

func (f logfLogger) Printf(format string, args ...any) { f(format, args...) }

// Version is the engine's server version.
func (e *Engine) Version() string { return e.version }

// Desktop reports whether the engine is Docker Desktop's, where host
// networking must be enabled by the user (Docker Desktop 4.34 or later).
func (e *Engine) Desktop() bool { return e.desktop }

// Swept returns the IDs of the containers Connect's sweep removed.
func (e *Engine) Swept() []string { return slices.Clone(e.swept) }

// Labels returns the labels the Engine puts on its containers.
func (e *Engine) Labels() map[string]string { return maps.Clone(e.labels) }

// Sweep removes the containers that owners on this host created and could
// not remove because they died (killed, timed out): those whose LabelPID
// names a process that no longer exists. It returns the IDs it removed.
func (e *Engine) Sweep(ctx context.Context) []string {
	defer e.cli.Close()
	host := e.labels[LabelHost]
	list, err := e.cli.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: make(client.Filters).Add("label", LabelHost+"="+host),
	})
	if err != nil {
		return nil
	}
	var removed []string
	for _, c := range list.Items {
		pid, err := strconv.Atoi(c.Labels[LabelPID])
		if err != nil || pid == os.Getpid() || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue
		}
		_, err = e.cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		if err == nil || cerrdefs.IsNotFound(err) {
			removed = append(removed, c.ID)
		}
	}
	return removed
}

// EnsureImage makes sure image is on the engine, pulling it if it is not;
// the result is remembered. envVar names the environment variable that
// chose the image, for the error message.
func (e *Engine) EnsureImage(ctx context.Context, image, envVar string) error {
	v, _ := e.images.LoadOrStore(image, &imageCheck{})
	c := v.(*imageCheck)
	c.once.Do(func() { c.err = e.pullIfMissing(ctx, image, envVar) })
	return c.err
}

func (e *Engine) pullIfMissing(ctx context.Context, image, envVar string) error {
	defer e.cli.Close()
	_, err := e.cli.ImageInspect(ctx, image)
	if err == nil {
		return nil
	}
	if !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("inspect image %s: %w", image, err)
	}
	resp, err := e.cli.ImagePull(ctx, image, client.ImagePullOptions{})
	if err == nil {
		err = resp.Wait(ctx)
	}
	if err == nil {
		_, err = e.cli.ImageInspect(ctx, image)
	}
	if err != nil {
		if envVar == "" {
			envVar = "the DLOCK_*_IMAGE variable"
		}
		return fmt.Errorf("image %s is not on this machine and pulling it failed (%v): "+
			"build it offline from Debian packages with `make images` (docker/README-containers.md), "+
			"pull it, or name another image with %s", image, err, envVar)
	}
	return nil
}

// File is a file written into a container before it starts.
type File struct {
	Path string
	Data []byte
	Mode int64
}

// Spec describes a container.
type Spec struct {
	Image       string
	Name        string
	Entrypoint  []string
	Cmd         []string
	Files       []File
	Labels      map[string]string // added to the Engine's labels
	HostNetwork bool
}

// ErrClosed is returned by Create once Close has begun.
var ErrClosed = errors.New("containers: engine closed")

// Create creates the container of spec, with its files, and does not start
// it. The Engine removes it at Close unless Remove did first.
func (e *Engine) Create(ctx context.Context, spec Spec) (string, error) {
	files := make([]testcontainers.ContainerFile, len(spec.Files))
	for i, f := range spec.Files {
		files[i] = testcontainers.ContainerFile{
			Reader: bytes.NewReader(f.Data), ContainerFilePath: f.Path, FileMode: f.Mode,
		}
	}
	labels := maps.Clone(spec.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	maps.Copy(labels, e.labels)
	req := testcontainers.GenericContainerRequest{
		ContainerRequest: testcontainers.ContainerRequest{
			Image:      spec.Image,
			Name:       spec.Name,
			Entrypoint: spec.Entrypoint,
			Cmd:        spec.Cmd,
			Labels:     labels,
			Files:      files,
			HostConfigModifier: func(hc *container.HostConfig) {
				if spec.HostNetwork {
					hc.NetworkMode = "host"
				}
			},
		},
		Logger: e.logger,
	}
	c, err := testcontainers.GenericContainer(ctx, req)
	var dc *testcontainers.DockerContainer
	if c != nil {
		dc, _ = c.(*testcontainers.DockerContainer)
	}
	if dc != nil {
		e.mu.Lock()
		closed := e.closed
		if !closed {
			e.ctrs[dc.GetContainerID()] = dc
		}
		e.mu.Unlock()
		if closed {
			e.remove(dc.GetContainerID())
			return "", ErrClosed
		}
	}
	if err != nil {
		if dc != nil {
			e.remove(dc.GetContainerID())
		}
		return "", fmt.Errorf("create container %s from %s: %w", spec.Name, spec.Image, err)
	}
	if dc == nil {
		return "", fmt.Errorf("create container %s from %s: got %T", spec.Name, spec.Image, c)
	}
	return dc.GetContainerID(), nil
}

func (e *Engine) get(id string) (*testcontainers.DockerContainer, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.ctrs[id]
	if c == nil {
		return nil, fmt.Errorf("container %.12s: not created by this engine, or removed", id)
	}
	return c, nil
}

// Start starts a created or exited container. It does not wait for its
// server: the caller probes it.
func (e *Engine) Start(ctx context.Context, id string) error {
	c, err := e.get(id)
	if err != nil {
		return err
	}
	return c.Start(ctx)
}

// State is a container's state.
type State struct {
	Found    bool // false: the engine does not know the container (removed)
	Running  bool // also while paused
	Paused   bool
	ExitCode int
	Status   string
}

// State inspects the container id (any container, not only this Engine's).
func (e *Engine) State(ctx context.Context, id string) (State, error) {
	defer e.cli.Close()
	r, err := e.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return State{}, nil
	}
	if err != nil {
		return State{}, err
	}
	st := r.Container.State
	if st == nil {
		return State{}, errors.New("no state in inspect reply")
	}
	return State{Found: true, Running: st.Running, Paused: st.Paused, ExitCode: st.ExitCode, Status: string(st.Status)}, nil
}

// Inspect returns the engine's whole description of the container id.
func (e *Engine) Inspect(ctx context.Context, id string) (container.InspectResponse, error) {
	defer e.cli.Close()
	r, err := e.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	return r.Container, err
}

// Pause freezes every process of the container (docker pause, the cgroup
// freezer); it returns once they are frozen.
func (e *Engine) Pause(ctx context.Context, id string) error {
	defer e.cli.Close()
	_, err := e.cli.ContainerPause(ctx, id, client.ContainerPauseOptions{})
	return wrap("docker pause", id, err)
}

// Unpause thaws a paused container (docker unpause).
func (e *Engine) Unpause(ctx context.Context, id string) error {
	defer e.cli.Close()
	_, err := e.cli.ContainerUnpause(ctx, id, client.ContainerUnpauseOptions{})
	return wrap("docker unpause", id, err)
}

// Kill sends SIGKILL (docker kill; a paused container is thawed by the
// engine so the signal lands) and waits until the container has exited.
// Killing a container that is not running is not an error.
func (e *Engine) Kill(ctx context.Context, id string) error {
	st, err := e.State(ctx, id)
	if err != nil {
		return wrap("inspect", id, err)
	}
	if !st.Running {
		return nil
	}
	defer e.cli.Close()
	if _, err := e.cli.ContainerKill(ctx, id, client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		if st, serr := e.State(ctx, id); serr == nil && !st.Running {
			return nil // exited on its own meanwhile
		}
		return wrap("docker kill", id, err)
	}
	return e.waitExited(ctx, id, "docker kill")
}

// Stop stops the container gracefully (docker stop: SIGTERM, SIGKILL after
// 5 seconds; a paused container is thawed by the engine first) and waits
// until it has exited.
func (e *Engine) Stop(ctx context.Context, id string) error {
	defer e.cli.Close()
	timeout := 5
	if _, err := e.cli.ContainerStop(ctx, id, client.ContainerStopOptions{Timeout: &timeout}); err != nil {
		return wrap("docker stop", id, err)
	}
	return e.waitExited(ctx, id, "docker stop")
}

func (e *Engine) waitExited(ctx context.Context, id, op string) error {
	for {
		st, err := e.State(ctx, id)
		if err != nil {
			return wrap("inspect", id, err)
		}
		if !st.Running {
			return nil
		}
		select {
		case <-ctx.Done():
			return wrap(op, id, fmt.Errorf("still running: %w", ctx.Err()))
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Remove kills and removes the container with its anonymous volumes. A
// container that is already gone is not an error.
func (e *Engine) Remove(ctx context.Context, id string) error {
	defer e.cli.Close()
	_, err := e.cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return wrap("docker rm", id, err)
	}
	e.mu.Lock()
	delete(e.ctrs, id)
	e.mu.Unlock()
	return nil
}

// Logs returns the last lines of the container's output (the servers log
// to stdout and stderr), interleaved.
func (e *Engine) Logs(ctx context.Context, id string, lines int) (string, error) {
	defer e.cli.Close()
	tail := "all"
	if lines > 0 {
		tail = strconv.Itoa(lines)
	}
	rc, err := e.cli.ContainerLogs(ctx, id, client.ContainerLogsOptions{
		ShowStdout: true, ShowStderr: true, Tail: tail,
	})
	if err != nil {
		return "", wrap("docker logs", id, err)
	}
	defer rc.Close()
	var buf bytes.Buffer
	if _, err := stdcopy.StdCopy(&buf, &buf, rc); err != nil && buf.Len() == 0 {
		return "", wrap("docker logs", id, err)
	}
	return buf.String(), nil
}

// Exec runs cmd in the container (one this Engine created) and returns its
// exit code and combined output.
func (e *Engine) Exec(ctx context.Context, id string, cmd []string) (int, string, error) {
	c, err := e.get(id)
	if err != nil {
		return 0, "", err
	}
	code, out, err := c.Exec(ctx, cmd, tcexec.Multiplexed())
	var b []byte
	if out != nil {
		b, _ = io.ReadAll(out)
	}
	if err != nil {
		return code, string(b), wrap("docker exec", id, err)
	}
	return code, string(b), nil
}

// Close removes every container the Engine created and not removed yet,
// and makes later Creates fail. It returns the IDs it removed.
func (e *Engine) Close(ctx context.Context) []string {
	e.mu.Lock()
	e.closed = true
	ids := make([]string, 0, len(e.ctrs))
	for id := range e.ctrs {
		ids = append(ids, id)
	}
	e.mu.Unlock()
	var wg sync.WaitGroup
	removed := make([]bool, len(ids))
	for i, id := range ids {
		wg.Go(func() { removed[i] = e.Remove(ctx, id) == nil })
	}
	wg.Wait()
	var out []string
	for i, id := range ids {
		if removed[i] {
			out = append(out, id)
		}
	}
	return out
}

// remove removes a container that Create will not return.
func (e *Engine) remove(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e.Remove(ctx, id)
}

func wrap(op, id string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("container %.12s: %s: %w", id, op, err)
}
