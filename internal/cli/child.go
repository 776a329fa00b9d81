package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// forwarded are the signals dlock passes on to the command. Before the
// command runs, any of them ends the wait for the lock instead.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// releaseTimeout bounds the Unlock after the command exits.
const releaseTimeout = 5 * time.Second

// run takes the lock, runs the command under it and returns dlock's exit
// status. It must run on the main goroutine: the command is started from
// the thread that init locked, so that its parent-death signal fires only
// when dlock dies (see sysProcAttr).
func (cfg *runConfig) run() int {
	path, code, err := lookCommand(cfg.argv[0])
	if err != nil {
		return cfg.fail(code, "%v", err)
	}
	sigc := make(chan os.Signal, 16)
	signal.Notify(sigc, notIgnored(forwarded)...)
	defer signal.Stop(sigc)

	// Take the lock in the background, so that a signal can end the wait.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resc := make(chan acquired, 1)
	began := time.Now()
	go func() { resc <- cfg.acquire(ctx, began) }()
	var waitLine *statusLine
	switch {
	case cfg.wait.once():
	case cfg.term:
		waitLine = startStatusLine(cfg.stderr, cfg.term, 200*time.Millisecond, 100*time.Millisecond, func(d time.Duration) string {
			s := fmt.Sprintf("waiting for %s on %s: %s", cfg.what(), backendName(cfg.url), seconds(d))
			if !cfg.wait.forever {
				s += fmt.Sprintf(" (gives up after %v)", cfg.wait.d)
			}
			return s
		})
	default:
		// cron, CI: no line to redraw, but with -v a record now and then.
		waitLine = cfg.startProgressLog(began)
	}
	var a acquired
	select {
	case a = <-resc:
	case sig := <-sigc:
		cancel()
		a = <-resc
		if waitLine != nil {
			waitLine.stop()
		}
		if a.lease != nil {
			cfg.release(a.locker, a.lease)
		} else if a.locker != nil {
			a.locker.Close()
		}
		return cfg.fail(exitSignal+signum(sig), "got %v while waiting for %s; the command did not run", sig, cfg.what())
	}
	if waitLine != nil {
		waitLine.stop()
	}
	if a.lease == nil {
		return cfg.fail(a.code, "%s", a.msg)
	}
	lease := a.lease
	if cfg.limit > 0 {
		cfg.log.Info("dlock: acquired a permit", "key", cfg.key, "limit", cfg.limit, "token", lease.Token(), "waited", time.Since(began).Round(time.Millisecond))
	} else {
		cfg.log.Info("dlock: acquired", "key", cfg.key, "token", lease.Token(), "waited", time.Since(began).Round(time.Millisecond))
	}
	if err := lease.Err(); err != nil {
		cfg.release(a.locker, lease)
		return cfg.fail(exitLost, "lease on %q lost before the command started: %v", cfg.key, err)
	}

	cmd := exec.Command(path, cfg.argv[1:]...)
	cmd.Args[0] = cfg.argv[0]
	cmd.Env = childEnv(lease, cfg.owner, cfg.elect)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		cfg.release(a.locker, lease)
		code := exitNoExec
		if errors.Is(err, os.ErrNotExist) {
			code = exitNotFound
		}
		return cfg.fail(code, "%v", err)
	}
	held := time.Now()
	status, lost := cfg.supervise(cmd, lease, sigc)
	terminated := lost != nil
	if lost == nil {
		// The lease may have been lost as the command exited: Done and the
		// exit were seen together. Say so rather than guess the order.
		lost = lease.Err()
	}
	cfg.release(a.locker, lease)
	if lost != nil {
		what := "the command was terminated"
		if !terminated {
			what = "the loss was seen as the command exited"
		}
		return cfg.fail(exitLost, "lease on %q lost after %v: %v; %s (its own status: %d)",
			cfg.key, time.Since(held).Round(time.Millisecond), lost, what, status)
	}
	cfg.log.Info("dlock: command exited", "key", cfg.key, "status", status, "held", time.Since(held).Round(time.Millisecond))
	return status
}

// supervise forwards signals to the command's process group until the
// command exits, and terminates the group if the lease is lost: SIGTERM,
// then SIGKILL after the grace period (also to what the command leaves
// behind in its group). It returns the command's exit status and, if the
// lease was lost meanwhile, why.
func (cfg *runConfig) supervise(cmd *exec.Cmd, lease *lock.Lease, sigc <-chan os.Signal) (int, error) {
	pgid := cmd.Process.Pid
	waitc := make(chan *os.ProcessState, 1)
	go func() {
		cmd.Wait()
		waitc <- cmd.ProcessState
	}()
	var (
		lost  error
		done  = lease.Done()
		grace <-chan time.Time
		risk  <-chan time.Time // dlock elect: checks of the term's deadline
		early bool             // SIGTERM was sent before Done, by a check
	)
	if cfg.elect && cfg.grace > 0 {
		tick := time.NewTicker(riskCheckEvery)
		defer tick.Stop()
		risk = tick.C
	}
	for {
		select {
		case sig := <-sigc:
			cfg.log.Info("dlock: forwarding signal", "signal", sig, "pgid", pgid)
			killGroup(pgid, sig.(syscall.Signal))
		case <-risk:
			left, ok := termAtRisk(lease, cfg.grace)
			if !ok {
				continue
			}
			risk, early = nil, true
			lost = fmt.Errorf("no renewal of the term succeeded, and its deadline was %v away", left.Round(time.Millisecond))
			cfg.log.Warn("dlock: term about to end; terminating the command", "key", cfg.key, "err", lost)
			killGroup(pgid, syscall.SIGTERM)
			grace = time.After(left)
		case <-done:
			done, risk = nil, nil
			lost = lease.Err()
			cfg.log.Warn("dlock: lease lost; terminating the command", "key", cfg.key, "err", lost, "grace", cfg.grace)
			if cfg.grace == 0 || early {
				grace = nil
				killGroup(pgid, syscall.SIGKILL)
			} else {
				killGroup(pgid, syscall.SIGTERM)
				grace = time.After(cfg.grace)
			}
		case <-grace:
			grace = nil
			cfg.log.Warn("dlock: grace period over; sending SIGKILL", "key", cfg.key, "pgid", pgid)
			killGroup(pgid, syscall.SIGKILL)
		case ps := <-waitc:
			if lost != nil {
				cfg.reapGroup(pgid, grace)
			}
			return exitStatus(ps), lost
		}
	}
}

// riskCheckEvery is how often dlock elect checks its term's deadline.
const riskCheckEvery = 50 * time.Millisecond

// termAtRisk reports whether lease's deadline, which each renewal pushes
// on, is within grace (at most half the validity, which a term renewed a
// third of the way to its deadline never comes within), and how far it
// is: dlock elect then stops its command so that it is gone, SIGKILL
// included, by the deadline, before another candidate can be elected.
func termAtRisk(lease *lock.Lease, grace time.Duration) (time.Duration, bool) {
	left := time.Until(lease.Deadline())
	return left, left <= min(grace, lease.Validity()/2)
}

// reapGroup waits for what the command left in its process group after a
// lost lease, until the grace period ends, and kills the rest.
func (cfg *runConfig) reapGroup(pgid int, grace <-chan time.Time) {
	if grace == nil { // SIGKILL was sent already, or -grace 0
		killGroup(pgid, syscall.SIGKILL)
		return
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for groupAlive(pgid) {
		select {
		case <-grace:
			killGroup(pgid, syscall.SIGKILL)
			return
		case <-tick.C:
		}
	}
}

// release unlocks the lease and closes the Locker. A failed release is
// logged: the backend frees the key when its TTL runs out.
func (cfg *runConfig) release(locker *lock.Locker, lease *lock.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	err := lease.Unlock(ctx)
	switch {
	case err == nil:
		cfg.log.Info("dlock: released", "key", cfg.key, "token", lease.Token())
	case errors.Is(err, lock.ErrNotHeld):
		// Lost: reported by the caller.
	default:
		cfg.log.Warn("dlock: release failed; the key is freed when its TTL runs out", "key", cfg.key, "err", err)
	}
	if err := locker.Close(); err != nil {
		cfg.log.Warn("dlock: closing the backend", "err", err)
	}
}

// notIgnored leaves out the signals dlock was started with ignored (nohup
// ignores SIGHUP; shells ignore SIGINT and SIGQUIT in background jobs):
// handling them would undo that for dlock, and the command inherits the
// ignored disposition itself.
func notIgnored(sigs []os.Signal) []os.Signal {
	var out []os.Signal
	for _, s := range sigs {
		if !signal.Ignored(s) {
			out = append(out, s)
		}
	}
	return out
}

func killGroup(pgid int, sig syscall.Signal) {
	if err := syscall.Kill(-pgid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		fmt.Fprintf(os.Stderr, "dlock: signalling process group %d: %v\n", pgid, err)
	}
}

func groupAlive(pgid int) bool { return syscall.Kill(-pgid, 0) == nil }

func signum(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return int(n)
	}
	return 0
}
