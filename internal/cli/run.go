package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock/lock"
)

const runUsage = `Usage: dlock run [flags] KEY [--] COMMAND [ARGS...]

Runs COMMAND while holding the lock KEY on the backend named by -url or
$DLOCK_URL, and releases it when COMMAND exits; with -limit N (or -n N),
while holding one of the N permits of KEY, so that at most N commands run
at once. COMMAND gets DLOCK_KEY, DLOCK_TOKEN (the fencing token) and
DLOCK_LEASE (the lease's handle) in its environment, and DLOCK_LIMIT with
a limit. Flags go before KEY; the first
argument after them is KEY, the rest COMMAND; -- before COMMAND is needed
only when COMMAND starts with -.

-n is consul lock's and flock's: -n N KEY COMMAND (a decimal N followed
by KEY before the command) is -limit N; -n followed by anything else is
-nonblock, fail at once: -n KEY COMMAND, and -n 5 -- COMMAND (KEY 5).

Exit status:
  0-255  the command's own (128+N if signal N killed it)
  1      the lock is held elsewhere: -wait ran out or -wait 0 found it held (-E)
  2      usage: bad flags or arguments, an invalid key, TTL or URL
  124    the lease was lost while the command ran; the command was terminated
  125    the backend could not be opened or failed while taking the lock
  126    the command was found but could not be started
  127    the command was not found
  128+N  dlock got signal N while waiting; the command did not run
Whenever dlock chooses the status itself, it says why on stderr, in a line
starting with "dlock:". More: go doc github.com/dlock-go/dlock/cmd/dlock
`

// runConfig is a parsed dlock run command line.
type runConfig struct {
	url      string
	key      string
	argv     []string
	ttl      time.Duration // 0: the Locker's default (the URL's ttl=, or lock.DefaultTTL)
	owner    string        // -owner: a named owner (lock.WithOwner), or ""
	limit    int           // -limit, -n N: take one of limit permits of KEY (*lock.Locker); 0: the lock
	elect    bool          // dlock elect: campaign in the election KEY instead of locking it
	announce string        // dlock elect -announce
	wait     waitFlag
	conflict int
	grace    time.Duration
	log      *slog.Logger
	stderr   io.Writer
	term     bool // stderr is a terminal: show the waiting line

	mu     sync.Mutex
	locker *lock.Locker // once acquire has opened the backend, for holder
}

// runFlags are run's flags that parseRun folds into its runConfig.
type runFlags struct {
	n        nFlag
	limit    int
	nonblock bool
	conflict exitCodeFlag
	log      logFlags
}

func parseRun(args []string, stderr io.Writer) (*runConfig, error) {
	cfg := &runConfig{wait: waitFlag{forever: true}, conflict: exitConflict, stderr: stderr}
	fs, rf := runFlagSet(cfg)
	rest, err := parseRunArgs(fs, &rf.n, args)
	if err != nil {
		return nil, err
	}
	cfg.conflict = int(rf.conflict)
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["url"] {
		cfg.url = os.Getenv("DLOCK_URL")
	}
	// Whatever dlock writes from now on goes through the scrubber (its
	// own messages name the backend redacted already).
	cfg.stderr = scrubbing(stderr, cfg.url)
	if err := cfg.setLimit(rf, set); err != nil {
		return nil, err
	}
	if rf.n.bare || rf.nonblock {
		if (set["wait"] || set["w"]) && !cfg.wait.once() {
			return nil, usageError("-nonblock (or -n without a limit) and -wait %v exclude each other", &cfg.wait)
		}
		cfg.wait = waitFlag{}
	}
	if cfg.key, cfg.argv, err = splitCommand(rest); err != nil {
		return nil, err
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	log, err := rf.log.logger(cfg.stderr)
	if err != nil {
		return nil, usageError("%v", err)
	}
	cfg.log = log
	routeLibraryLogs(log)
	return cfg, nil
}

// runFlagSet makes run's flag set, with the flags that set cfg directly
// and those parseRun folds in afterwards (rf).
func runFlagSet(cfg *runConfig) (*flag.FlagSet, *runFlags) {
	rf := &runFlags{conflict: exitCodeFlag(exitConflict)}
	fs := newFlagSet("run", runUsage)
	// Not os.Getenv("DLOCK_URL") as the flag's default: -h prints
	// defaults, and the URL may carry a password.
	urlHelp := "backend URL (default $DLOCK_URL), e.g. redisnx://localhost:6379"
	if env := os.Getenv("DLOCK_URL"); env != "" {
		urlHelp = fmt.Sprintf("backend URL (default $DLOCK_URL, now %s)", backendName(env))
	}
	fs.StringVar(&cfg.url, "url", "", urlHelp)
	durationVar(fs, &cfg.ttl, "ttl", 0, "lease time, a `duration` or seconds, renewed every TTL/3 while COMMAND runs (0, the default: the URL's ttl= or 30s)")
	fs.StringVar(&cfg.owner, "owner", os.Getenv("DLOCK_OWNER"), "name the lock's owner (default $DLOCK_OWNER): a dlock run of KEY inside COMMAND, which inherits DLOCK_OWNER, re-enters the lock instead of waiting for it")
	fs.Var(&rf.n, "n", "-n N KEY: same as -limit N (N followed by KEY, then the command); -n KEY, or -n followed by anything else: same as -nonblock (flock -n)")
	fs.IntVar(&rf.limit, "limit", 0, "at most `N` commands run at once for KEY: take one of the N permits of a semaphore instead of the lock (N from 1; not with -owner; consul lock -n)")
	fs.BoolVar(&rf.nonblock, "nonblock", false, "fail at once if the lock is held: same as -wait 0 (flock -n)")
	fs.BoolVar(&rf.nonblock, "nb", false, "same as -nonblock")
	fs.Var(&cfg.wait, "wait", "how long to wait for the lock: 0 tries once (like flock -n), a `duration` or seconds, or forever")
	fs.Var(&cfg.wait, "w", "same as -wait: flock -w `seconds` (or a duration)")
	fs.Var(&rf.conflict, "E", "exit `status` when the lock is held elsewhere (like flock -E)")
	fs.Var(&rf.conflict, "conflict-exit-code", "same as -E `status`")
	durationVar(fs, &cfg.grace, "grace", 5*time.Second, "after a lost lease, time between SIGTERM and SIGKILL to COMMAND, a `duration` or seconds (0: SIGKILL at once)")
	rf.log.register(fs)
	return fs, rf
}

// parseRunArgs parses run's flags and returns the arguments after them
// (KEY and the command). -n N is the limit if a KEY follows N, else
// flock's -n before KEY N.
func parseRunArgs(fs *flag.FlagSet, n *nFlag, args []string) ([]string, error) {
	flags, rest := splitFlags(fs, args)
	if err := parseFlags(fs, flags); err != nil {
		return nil, err
	}
	if !n.bare || len(flags) == 0 || !isBareN(flags[len(flags)-1]) || len(rest) == 0 || !isDecimal(rest[0]) {
		return rest, nil
	}
	more, pos, isLimit := splitN(fs, rest)
	switch {
	case isLimit:
		if err := parseFlags(fs, more); err != nil {
			return nil, err
		}
		if err := n.Set(rest[0]); err != nil { // a decimal: cannot fail
			return nil, usageError("-n %s: %v", rest[0], err)
		}
		return pos, nil
	case len(more) > 0:
		return nil, usageError("-n %s %s: with no KEY after %s, -n is -nonblock and %s the KEY, and flags go before KEY (-limit N is the semaphore's limit, whatever follows)", rest[0], more[0], rest[0], rest[0])
	}
	return rest, nil
}

// setLimit sets cfg.limit from -n N or -limit N, and checks it.
func (cfg *runConfig) setLimit(rf *runFlags, set map[string]bool) error {
	limitFlag, limitText := "", ""
	switch {
	case rf.n.given && set["limit"] && rf.n.limit != rf.limit:
		return usageError("-n %s and -limit %d disagree", rf.n.text, rf.limit)
	case rf.n.given:
		cfg.limit, limitFlag, limitText = rf.n.limit, "-n", rf.n.text
	case set["limit"]:
		cfg.limit, limitFlag, limitText = rf.limit, "-limit", strconv.Itoa(rf.limit)
	}
	if limitFlag == "" {
		return nil
	}
	switch {
	case cfg.limit < 1 || cfg.limit > lock.MaxPermits:
		return usageError("%s %s: %s; want 1 to %d permits", limitFlag, limitText, whatIsWrong(cfg.limit), lock.MaxPermits)
	case set["owner"] && cfg.owner != "":
		return usageError("%s and -owner exclude each other: a permit is not reentrant", limitFlag)
	}
	// $DLOCK_OWNER, inherited from a dlock run -owner around this one,
	// is for re-entering locks: a permit cannot.
	cfg.owner = ""
	return nil
}

// check refuses a run with no backend, a backend this build lacks, or a
// negative duration.
func (cfg *runConfig) check() error {
	if cfg.url == "" {
		return usageError("no backend: set -url or DLOCK_URL, e.g. redisnx://localhost:6379")
	}
	if hint := schemeHint(cfg.url); hint != "" {
		return usageError("backend URL %q: %s", backendNameRaw(cfg.url), hint)
	}
	if msg := notCompiledIn(cfg.url); msg != "" {
		return usageError("backend URL %q: %s", backendNameRaw(cfg.url), msg)
	}
	if cfg.ttl < 0 {
		return usageError("-ttl %v is negative", cfg.ttl)
	}
	if cfg.grace < 0 {
		return usageError("-grace %v is negative", cfg.grace)
	}
	return nil
}

// whatIsWrong says why a number of permits is refused.
func whatIsWrong(limit int) string {
	switch {
	case limit > lock.MaxPermits:
		return "too many permits"
	case limit < 0:
		return "a number of permits cannot be negative"
	}
	return "zero permits would admit no command"
}

type usageErr struct{ msg string }

func (e *usageErr) Error() string { return e.msg }

func usageError(format string, args ...any) error {
	return &usageErr{fmt.Sprintf(format, args...)}
}

// cmdRun is dlock run. It returns the exit status.
func cmdRun(args []string) int {
	urls := append(argURLs(args), os.Getenv("DLOCK_URL"))
	stderr := scrubbing(os.Stderr, urls...)
	cfg, err := parseRun(args, stderr)
	if err == nil {
		err = acrossProcesses(cfg.url)
	}
	if err != nil {
		return parseFailed("run", err, scrubbing(os.Stdout, urls...), stderr)
	}
	cfg.term = isTerminal(os.Stderr)
	return cfg.run()
}

// acrossProcesses refuses a backend whose locks live in one process
// (memory://): every dlock run is a process of its own, so such a lock
// would exclude nothing. It is checked here, not in parseRun, which the
// tests also use to run dlock run's path inside one process.
func acrossProcesses(url string) error {
	if schemeOf(url) == "memory" {
		return usageError("memory:// keeps its locks inside one process, and every dlock run is a process of its own: a lock there would exclude nothing. Use a network backend: %s",
			strings.Join(compiledURLs(), ", "))
	}
	return nil
}

// what names what the run takes, for messages: the lock KEY, or a permit
// of it.
func (cfg *runConfig) what() string {
	if cfg.limit > 0 {
		return fmt.Sprintf("one of the %d permits of %q", cfg.limit, cfg.key)
	}
	if cfg.elect {
		return fmt.Sprintf("the leadership of %q", cfg.key)
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
