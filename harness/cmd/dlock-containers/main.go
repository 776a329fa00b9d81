// Command dlock-containers is the container helper of testserver's "docker"
// provider: it serves the operations of harness/containers (connect, image,
// create, start, state, pause, unpause, kill, stop, remove, logs, exec) to
// one test binary over its standard input and output, with net/rpc and the
// JSON-RPC codec, as internal/testsupport/testserver/containerrpc describes. Calls are
// served concurrently.
//
// testserver starts one helper per test binary, on first use of the docker
// provider. When the helper's standard input ends (the test binary finished
// or died) or it gets SIGTERM (on Linux, the parent-death signal testserver
// asks for), it removes every container it created and exits. Its
// containers carry its pid and host name as labels, so that the next helper
// removes those of a helper that could not (see containers.Sweep).
//
// Nothing but the protocol goes to standard output: the helper moves its
// standard output to its standard error at start. With
// DLOCK_TESTSERVER_DEBUG set, it logs each operation and testcontainers-go's
// own lines to its standard error.
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/rpc"
	"net/rpc/jsonrpc"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/dlock-go/dlock/harness/containers"
	"github.com/dlock-go/dlock/internal/testsupport/testserver/containerrpc"
	"golang.org/x/sys/unix"
)

func main() {
	log.SetFlags(log.Lmicroseconds)
	log.SetPrefix(fmt.Sprintf("dlock-containers[%d]: ", os.Getpid()))
	// The protocol gets its own descriptor; descriptor 1 becomes stderr, so
	// that nothing a library prints can corrupt the stream.
	fd, err := unix.Dup(1)
	if err != nil {
		log.Fatalf("dup stdout: %v", err)
	}
	unix.CloseOnExec(fd)
	if err := unix.Dup2(2, 1); err != nil {
		log.Fatalf("stdout to stderr: %v", err)
	}
	out := os.NewFile(uintptr(fd), "rpc-out")

	s := newService(os.Getenv("DLOCK_TESTSERVER_DEBUG") != "")
	signal.Ignore(syscall.SIGINT, syscall.SIGPIPE)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		sig := <-sigs
		s.logf("%v: removing my containers", sig)
		s.shutdown()
		os.Exit(0)
	}()

	serve(s, os.Stdin, out)
	s.logf("standard input closed: removing my containers")
	s.shutdown()
}

// serve serves s's calls read from r, replying on w, until r ends.
func serve(s *Service, r io.Reader, w io.Writer) {
	srv := rpc.NewServer()
	if err := srv.RegisterName(containerrpc.Service, s); err != nil {
		log.Fatal(err)
	}
	srv.ServeCodec(jsonrpc.NewServerCodec(stdio{r, w}))
}

type stdio struct {
	io.Reader
	io.Writer
}

func (stdio) Close() error { return nil }

// Service is the net/rpc service Containers. Its exported methods are the
// protocol's; see containerrpc.
type Service struct {
	debug bool

	mu       sync.Mutex
	eng      *containers.Engine
	err      error
	tried    bool
	shutOnce sync.Once
}

func newService(debug bool) *Service { return &Service{debug: debug} }

func (s *Service) logf(format string, args ...any) {
	if s.debug {
		log.Printf(format, args...)
	}
}

// engine connects on first use and returns the connection, or the error
// of that first attempt.
func (s *Service) engine() (*containers.Engine, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.tried {
		s.tried = true
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		opts := containers.Options{}
		if s.debug {
			opts.Logf = func(format string, args ...any) { log.Printf("testcontainers: "+format, args...) }
		}
		s.eng, s.err = containers.Connect(ctx, opts)
		if s.err == nil {
			s.logf("connected to Docker %s; swept %d containers of dead owners %.12q", s.eng.Version(), len(s.eng.Swept()), s.eng.Swept())
		}
	}
	return s.eng, s.err
}

// shutdown removes every container this helper created.
func (s *Service) shutdown() {
	s.shutOnce.Do(func() {
		s.mu.Lock()
		e := s.eng
		s.tried = true // no connection from now on
		if e == nil && s.err == nil {
			s.err = containers.ErrClosed
		}
		s.mu.Unlock()
		if e == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		ids := e.Close(ctx)
		s.logf("removed %d containers", len(ids))
	})
}

func opCtx(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// Hello returns the protocol version and the helper's pid.
func (s *Service) Hello(_ containerrpc.Empty, reply *containerrpc.Hello) error {
	*reply = containerrpc.Hello{Protocol: containerrpc.Protocol, PID: os.Getpid()}
	return nil
}

// Connect connects to the Docker engine (once) and describes it.
func (s *Service) Connect(_ containerrpc.Empty, reply *containerrpc.Engine) error {
	e, err := s.engine()
	if err != nil {
		return err
	}
	*reply = containerrpc.Engine{Version: e.Version(), Desktop: e.Desktop()}
	return nil
}

// Image makes sure the image is on the engine.
func (s *Service) Image(args containerrpc.ImageArgs, _ *containerrpc.Empty) error {
	e, err := s.engine()
	if err != nil {
		return err
	}
	ctx, cancel := opCtx(5 * time.Minute)
	defer cancel()
	return e.EnsureImage(ctx, args.Image, args.EnvVar)
}

// Create creates a container and does not start it.
func (s *Service) Create(args containerrpc.CreateArgs, reply *containerrpc.ID) error {
	e, err := s.engine()
	if err != nil {
		return err
	}
	files := make([]containers.File, len(args.Files))
	for i, f := range args.Files {
		files[i] = containers.File{Path: f.Path, Data: f.Data, Mode: f.Mode}
	}
	ctx, cancel := opCtx(2 * time.Minute)
	defer cancel()
	id, err := e.Create(ctx, containers.Spec{
		Image: args.Image, Name: args.Name, Entrypoint: args.Entrypoint, Cmd: args.Cmd,
		Files: files, Labels: args.Labels, HostNetwork: args.HostNetwork,
	})
	s.logf("create %s (%s): %.12s %v", args.Name, args.Image, id, err)
	reply.ID = id
	return err
}

// do runs one operation on a container with a deadline.
func (s *Service) do(op string, id string, d time.Duration, f func(context.Context, *containers.Engine) error) error {
	e, err := s.engine()
	if err != nil {
		return err
	}
	ctx, cancel := opCtx(d)
	defer cancel()
	err = f(ctx, e)
	s.logf("%s %.12s: %v", op, id, err)
	return err
}

// Start starts a container.
func (s *Service) Start(args containerrpc.ID, _ *containerrpc.Empty) error {
	return s.do("start", args.ID, 30*time.Second, func(ctx context.Context, e *containers.Engine) error {
		return e.Start(ctx, args.ID)
	})
}

// State inspects a container.
func (s *Service) State(args containerrpc.ID, reply *containerrpc.State) error {
	e, err := s.engine()
	if err != nil {
		return err
	}
	ctx, cancel := opCtx(30 * time.Second)
	defer cancel()
	st, err := e.State(ctx, args.ID)
	*reply = containerrpc.State{Found: st.Found, Running: st.Running, Paused: st.Paused, ExitCode: st.ExitCode, Status: st.Status}
	return err
}

// Pause freezes a container.
func (s *Service) Pause(args containerrpc.ID, _ *containerrpc.Empty) error {
	return s.do("pause", args.ID, 30*time.Second, func(ctx context.Context, e *containers.Engine) error {
		return e.Pause(ctx, args.ID)
	})
}

// Unpause thaws a container.
func (s *Service) Unpause(args containerrpc.ID, _ *containerrpc.Empty) error {
	return s.do("unpause", args.ID, 30*time.Second, func(ctx context.Context, e *containers.Engine) error {
		return e.Unpause(ctx, args.ID)
	})
}

// Kill kills a container and waits until it has exited.
func (s *Service) Kill(args containerrpc.ID, _ *containerrpc.Empty) error {
	return s.do("kill", args.ID, 30*time.Second, func(ctx context.Context, e *containers.Engine) error {
		return e.Kill(ctx, args.ID)
	})
}

// Stop stops a container (5 s grace) and waits until it has exited.
func (s *Service) Stop(args containerrpc.ID, _ *containerrpc.Empty) error {
	return s.do("stop", args.ID, 30*time.Second, func(ctx context.Context, e *containers.Engine) error {
		return e.Stop(ctx, args.ID)
	})
}

// Remove removes a container with its volumes.
func (s *Service) Remove(args containerrpc.ID, _ *containerrpc.Empty) error {
	return s.do("remove", args.ID, 30*time.Second, func(ctx context.Context, e *containers.Engine) error {
		return e.Remove(ctx, args.ID)
	})
}

// Logs returns the last lines of a container's output.
func (s *Service) Logs(args containerrpc.LogsArgs, reply *containerrpc.Logs) error {
	e, err := s.engine()
	if err != nil {
		return err
	}
	ctx, cancel := opCtx(30 * time.Second)
	defer cancel()
	reply.Text, err = e.Logs(ctx, args.ID, args.Lines)
	return err
}

// Exec runs a command in a container.
func (s *Service) Exec(args containerrpc.ExecArgs, reply *containerrpc.ExecReply) error {
	e, err := s.engine()
	if err != nil {
		return err
	}
	ctx, cancel := opCtx(time.Minute)
	defer cancel()
	reply.ExitCode, reply.Output, err = e.Exec(ctx, args.ID, args.Cmd)
	s.logf("exec %.12s %q: exit %d %v", args.ID, args.Cmd, reply.ExitCode, err)
	return err
}
