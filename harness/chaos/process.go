package chaos

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/rpc"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
)

// Child processes: the running binary (a test binary) started again with
// an environment that makes it serve as a helper, a holder of leases that
// a test can freeze (SIGSTOP) or kill (SIGKILL) at will. The child tells
// the parent where it listens with ChildReady and lives until its standard
// input closes (WaitForParent), which happens when the parent calls
// Shutdown or dies.

// childReady starts the line a child prints when it is ready.
const childReady = "child listening "

// Child is the parent's handle on a child process.
type Child struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	exited chan struct{}

	logMu sync.Mutex
	log   bytes.Buffer

	mu   sync.Mutex
	dead bool
}

// StartChild starts os.Args[0] with env added to this process's
// environment, and waits until it printed its address with ChildReady.
// The child gets SIGKILL if the parent dies. Its output is kept for
// LogTail.
func StartChild(name string, env []string) (*Child, string, error) {
	c := &Child{name: name, exited: make(chan struct{})}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, "", err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	cmd.Stderr = &lockedWriter{mu: &c.logMu, w: &c.log}
	c.cmd, c.stdin = cmd, stdin
	if err := testserver.Spawn(cmd); err != nil {
		return nil, "", err
	}
	addrc := make(chan string, 1)
	go func() {
		r := bufio.NewReader(stdout)
		first := true
		for {
			line, err := r.ReadString('\n')
			if first && strings.HasPrefix(line, childReady) {
				addrc <- strings.TrimSpace(strings.TrimPrefix(line, childReady))
				first = false
			} else if line != "" {
				c.logMu.Lock()
				c.log.WriteString(line)
				c.logMu.Unlock()
			}
			if err != nil {
				break
			}
		}
		cmd.Wait()
		close(c.exited)
	}()
	select {
	case addr := <-addrc:
		return c, addr, nil
	case <-c.exited:
		return nil, "", fmt.Errorf("child %s exited at start: %s", name, c.LogTail())
	case <-time.After(20 * time.Second):
		c.Kill()
		return nil, "", fmt.Errorf("child %s did not start: %s", name, c.LogTail())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// Name is the child's name.
func (c *Child) Name() string { return c.name }

// Pid is the child's process id.
func (c *Child) Pid() int { return c.cmd.Process.Pid }

// Exited is closed once the child has exited.
func (c *Child) Exited() <-chan struct{} { return c.exited }

// Dead reports whether Kill or Shutdown was called.
func (c *Child) Dead() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dead
}

// LogTail returns the end of the child's output.
func (c *Child) LogTail() string {
	c.logMu.Lock()
	defer c.logMu.Unlock()
	s := c.log.String()
	if len(s) > 3000 {
		s = s[len(s)-3000:]
	}
	return s
}

// Stop freezes the child with SIGSTOP and returns once every thread of it
// is stopped, so that it can no longer act.
func (c *Child) Stop() error {
	pid := c.Pid()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return err
	}
	return testserver.WaitStopped(pid, 5*time.Second)
}

// Continue resumes a stopped child (SIGCONT).
func (c *Child) Continue() error { return syscall.Kill(c.Pid(), syscall.SIGCONT) }

// Kill ends the child with SIGKILL and waits (up to 10s) until it is
// gone. It reports whether this call killed it: false if Kill or Shutdown
// came first.
func (c *Child) Kill() bool {
	c.mu.Lock()
	dead := c.dead
	c.dead = true
	c.mu.Unlock()
	if dead {
		return false
	}
	syscall.Kill(c.Pid(), syscall.SIGKILL)
	select {
	case <-c.exited:
	case <-time.After(10 * time.Second):
	}
	return true
}

// Shutdown ends the child: it is continued if stopped, its standard input
// is closed, and it is killed if it has not exited after grace. It returns
// once the child has exited.
func (c *Child) Shutdown(grace time.Duration) {
	c.mu.Lock()
	dead := c.dead
	c.dead = true
	c.mu.Unlock()
	if !dead {
		syscall.Kill(c.Pid(), syscall.SIGCONT)
		c.stdin.Close()
		select {
		case <-c.exited:
		case <-time.After(grace):
			syscall.Kill(c.Pid(), syscall.SIGKILL)
		}
	}
	<-c.exited
}

// ChildReady is called by a child process once it listens on addr: it
// tells the parent (StartChild) the address.
func ChildReady(addr net.Addr) { fmt.Printf("%s%s\n", childReady, addr) }

// WaitForParent returns when the parent closed the child's standard input
// (Shutdown), or died.
func WaitForParent() { io.Copy(io.Discard, os.Stdin) }

// RPCServer serves an rpc.Server on a free loopback port, a goroutine per
// connection, until Close: the parent's service for its children, and a
// child's for its parent.
type RPCServer struct {
	ln net.Listener
	wg sync.WaitGroup

	mu    sync.Mutex
	conns []net.Conn
}

// ServeRPC serves srv on a free loopback port.
func ServeRPC(srv *rpc.Server) (*RPCServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &RPCServer{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				srv.ServeConn(c)
			}()
		}
	}()
	return s, nil
}

// Addr is where the server listens.
func (s *RPCServer) Addr() net.Addr { return s.ln.Addr() }

// Close stops the server, closes its connections and waits for their
// calls to return.
func (s *RPCServer) Close() {
	s.ln.Close()
	s.mu.Lock()
	for _, c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}
