package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"time"

	"github.com/dlock-go/dlock/lock"
)

const runUsage = `Usage: dlock run [flags] KEY -- COMMAND [ARGS...]

Runs COMMAND while holding the lock KEY on the backend named by -url or
$DLOCK_URL, and releases it when COMMAND exits; with -n N, while holding
one of the N permits of KEY, so that at most N commands run at once.
COMMAND gets DLOCK_KEY and DLOCK_TOKEN (the fencing token) in its
environment, and DLOCK_LIMIT with -n. Flags go before KEY.
See "go doc github.com/dlock-go/dlock/cmd/dlock" for exit statuses.
`

// runConfig is a parsed dlock run command line.
type runConfig struct {
	url      string
	key      string
	argv     []string
	ttl      time.Duration // 0: the Locker's default (the URL's ttl=, or lock.DefaultTTL)
	owner    string        // -owner: a named owner (lock.WithOwner), or ""
	limit    int           // -n: take one of limit permits of KEY (lock.SemLocker); 0: the lock
	wait     waitFlag
	conflict int
	grace    time.Duration
	log      *slog.Logger
	stderr   io.Writer
	term     bool // stderr is a terminal: show the waiting line
}

func parseRun(args []string, stderr io.Writer) (*runConfig, error) {
	cfg := &runConfig{wait: waitFlag{forever: true}, conflict: exitConflict, stderr: stderr}
	fs := newFlagSet("run", runUsage)
	fs.SetOutput(stderr)
	// Not os.Getenv("DLOCK_URL") as the flag's default: -h prints
	// defaults, and the URL may carry a password.
	urlHelp := "backend URL (default $DLOCK_URL), e.g. redisnx://localhost:6379"
	if env := os.Getenv("DLOCK_URL"); env != "" {
		urlHelp = fmt.Sprintf("backend URL (default $DLOCK_URL, now %s)", backendName(env))
	}
	fs.StringVar(&cfg.url, "url", "", urlHelp)
	fs.DurationVar(&cfg.ttl, "ttl", 0, "lease time, renewed every TTL/3 while COMMAND runs (default: the URL's ttl= or 30s)")
	fs.StringVar(&cfg.owner, "owner", os.Getenv("DLOCK_OWNER"), "name the lock's owner (default $DLOCK_OWNER): a dlock run of KEY inside COMMAND, which inherits DLOCK_OWNER, re-enters the lock instead of waiting for it")
	fs.IntVar(&cfg.limit, "n", 0, "at most N commands run at once for KEY: take one of the N permits of a semaphore instead of the lock (N from 1; not with -owner)")
	fs.Var(&cfg.wait, "wait", "how long to wait for the lock: 0 tries once (like flock -n), a duration or seconds, or forever")
	conflict := exitCodeFlag(exitConflict)
	fs.Var(&conflict, "E", "exit status when the lock is held elsewhere (like flock -E)")
	fs.Var(&conflict, "conflict-exit-code", "same as -E")
	fs.DurationVar(&cfg.grace, "grace", 5*time.Second, "after a lost lease, time between SIGTERM and SIGKILL to COMMAND (0: SIGKILL at once)")
	var lf logFlags
	lf.register(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	cfg.conflict = int(conflict)
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["url"] {
		cfg.url = os.Getenv("DLOCK_URL")
	}
	// Whatever dlock writes from now on goes through the scrubber (its
	// own messages name the backend redacted already).
	cfg.stderr = scrubbing(stderr, cfg.url)
	stderr = cfg.stderr
	if set["n"] {
		switch {
		case cfg.limit < 1 || cfg.limit > lock.MaxPermits:
			return nil, usageError("-n %d: want a number of permits from 1 to %d", cfg.limit, lock.MaxPermits)
		case set["owner"] && cfg.owner != "":
			return nil, usageError("-n and -owner exclude each other: a permit is not reentrant")
		}
		// $DLOCK_OWNER, inherited from a dlock run -owner around this one,
		// is for re-entering locks: a permit cannot.
		cfg.owner = ""
	}
	rest := fs.Args()
	switch {
	case len(rest) == 0:
		return nil, usageError("missing KEY -- COMMAND")
	case len(rest) == 1 && rest[0] != "--":
		return nil, usageError("missing -- COMMAND after KEY %q", rest[0])
	case rest[0] == "--":
		return nil, usageError("missing KEY before --")
	case rest[1] != "--":
		return nil, usageError("want KEY -- COMMAND, got %q after KEY %q (flags go before KEY)", rest[1], rest[0])
	case len(rest) == 2:
		return nil, usageError("missing COMMAND after --")
	}
	cfg.key, cfg.argv = rest[0], rest[2:]
	if cfg.url == "" {
		return nil, usageError("no backend: set -url or DLOCK_URL, e.g. redisnx://localhost:6379")
	}
	if cfg.ttl < 0 {
		return nil, usageError("-ttl %v is negative", cfg.ttl)
	}
	if cfg.grace < 0 {
		return nil, usageError("-grace %v is negative", cfg.grace)
	}
	log, err := lf.logger(stderr)
	if err != nil {
		return nil, usageError("%v", err)
	}
	cfg.log = log
	routeLibraryLogs(log)
	return cfg, nil
}

type usageErr struct{ msg string }

func (e *usageErr) Error() string { return e.msg }

func usageError(format string, args ...any) error {
	return &usageErr{fmt.Sprintf(format, args...)}
}

// cmdRun is dlock run. It returns the exit status.
func cmdRun(args []string) int {
	stderr := scrubbing(os.Stderr, append(argURLs(args), os.Getenv("DLOCK_URL"))...)
	cfg, err := parseRun(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		var ue *usageErr
		if errors.As(err, &ue) {
			fmt.Fprintf(stderr, "dlock run: %v\n(dlock run -h for help)\n", err)
		}
		return exitUsage // the flag package has printed its own message
	}
	cfg.term = isTerminal(os.Stderr)
	return cfg.run()
}

// what names what the run takes, for messages: the lock KEY, or a permit
// of it.
func (cfg *runConfig) what() string {
	if cfg.limit > 0 {
		return fmt.Sprintf("one of the %d permits of %q", cfg.limit, cfg.key)
	}
	return fmt.Sprintf("lock %q", cfg.key)
}

// fail prints a "dlock:" line saying why dlock chose code, and returns code.
func (cfg *runConfig) fail(code int, format string, args ...any) int {
	fmt.Fprintf(cfg.stderr, "dlock: "+format+"\n", args...)
	return code
}

// lookCommand resolves argv[0] before the lock is taken, so that a typo
// does not hold the key: 127 when not found, 126 when not executable.
func lookCommand(name string) (string, int, error) {
	path, err := exec.LookPath(name)
	switch {
	case err == nil:
		return path, 0, nil
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, os.ErrNotExist):
		return "", exitNotFound, err
	default:
		return "", exitNoExec, err
	}
}
