package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/dlock-go/dlock/lock"
)

const electUsage = `Usage: dlock elect [flags] NAME [--] COMMAND [ARGS...]

Campaigns in the leader election NAME on the backend named by -url or
$DLOCK_URL, and runs COMMAND only while this instance leads. Candidates
that run dlock elect with the same NAME wait, in arrival order, for the
leader's term to end. When dlock cannot renew the term, COMMAND gets
SIGTERM once the term's deadline is -grace away (at most half the
term's validity: the TTL, less on memcached and ZooKeeper) and SIGKILL
at the deadline: it is gone before any other candidate can be elected. When the term ends behind dlock's back (its grant deleted),
COMMAND gets SIGTERM, then SIGKILL after -grace. With -again, dlock
then campaigns again, and otherwise exits 124. When COMMAND exits on
its own, dlock resigns and exits with its status.

COMMAND gets DLOCK_KEY (NAME), DLOCK_TERM and DLOCK_TOKEN (both the term
number, a fencing token that increases across leaders: send it with every
write), and DLOCK_LEASE (the term's handle). The announcement (-announce)
is what observers see of the leader where the backend stores it
(dlock inspect NAME shows it as the holder's note).

Exit status:
  0-255  the command's own (128+N if signal N killed it)
  2      usage: bad flags or arguments, an invalid name, TTL or URL
  124    the term was lost while the command ran (without -again)
  125    the backend could not be opened or failed while campaigning
  126    the command was found but could not be started
  127    the command was not found
  128+N  dlock got signal N while campaigning; the command did not run
More: go doc github.com/dlock-go/dlock/cmd/dlock
`

// electFlags are elect's flags beyond those it shares with run.
type electFlags struct {
	again bool
	log   logFlags
}

// parseElect parses dlock elect's command line into the runConfig that
// runs it: a run of NAME that waits for ever, campaigning with the
// announcement.
func parseElect(args []string, stderr io.Writer) (*runConfig, bool, error) {
	cfg := &runConfig{wait: waitFlag{forever: true}, conflict: exitConflict, stderr: stderr, elect: true}
	var ef electFlags
	fs := newFlagSet("elect", electUsage)
	urlHelp := "backend URL (default $DLOCK_URL), e.g. redisnx://localhost:6379"
	if env := os.Getenv("DLOCK_URL"); env != "" {
		urlHelp = fmt.Sprintf("backend URL (default $DLOCK_URL, now %s)", backendName(env))
	}
	fs.StringVar(&cfg.url, "url", "", urlHelp)
	durationVar(fs, &cfg.ttl, "ttl", 0, "term lease time, a `duration` or seconds, renewed every TTL/3 while COMMAND runs: a crashed leader's term ends within it (0, the default: the URL's ttl= or 30s)")
	fs.StringVar(&cfg.announce, "announce", defaultAnnouncement(), "what observers see of this leader: `text` of at most 256 printable bytes (default host:pid)")
	fs.BoolVar(&ef.again, "again", false, "after a lost term, campaign again instead of exiting 124")
	durationVar(fs, &cfg.grace, "grace", 5*time.Second, "when renewals fail, how long before the term's deadline COMMAND gets SIGTERM (SIGKILL at the deadline; at most half the term's validity); after a term ended otherwise, time between SIGTERM and SIGKILL; a `duration` or seconds (0: SIGKILL at once)")
	ef.log.register(fs)
	flags, rest := splitFlags(fs, args)
	if err := parseFlags(fs, flags); err != nil {
		return nil, false, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["url"] {
		cfg.url = os.Getenv("DLOCK_URL")
	}
	cfg.stderr = scrubbing(stderr, cfg.url)
	var err error
	if cfg.key, cfg.argv, err = splitCommand(rest); err != nil {
		return nil, false, err
	}
	if err := cfg.check(); err != nil {
		return nil, false, err
	}
	log, err := ef.log.logger(cfg.stderr)
	if err != nil {
		return nil, false, usageError("%v", err)
	}
	cfg.log = log
	routeLibraryLogs(log)
	return cfg, ef.again, nil
}

// defaultAnnouncement is this process's host name and pid.
func defaultAnnouncement() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host"
	}
	return fmt.Sprintf("%s:%d", host, os.Getpid())
}

// cmdElect is dlock elect. It returns the exit status.
func cmdElect(args []string) int {
	urls := append(argURLs(args), os.Getenv("DLOCK_URL"))
	stderr := scrubbing(os.Stderr, urls...)
	cfg, again, err := parseElect(args, stderr)
	if err == nil {
		err = acrossProcesses(cfg.url)
	}
	if err != nil {
		return parseFailed("elect", err, scrubbing(os.Stdout, urls...), stderr)
	}
	cfg.term = isTerminal(os.Stderr)
	for {
		code := cfg.run()
		if code != exitLost || !again {
			return code
		}
		cfg.log.Info("dlock: campaigning again after a lost term", "name", cfg.key)
	}
}

// campaigners returns the Try and waiting calls that take NAME's term
// through locker's Election, with cfg's announcement.
func (cfg *runConfig) campaigners(locker *lock.Locker) (try, wait func(context.Context, string, ...lock.Option) (*lock.Lease, error), err error) {
	e, err := locker.Election(cfg.key)
	if err != nil {
		return nil, nil, err
	}
	try = func(ctx context.Context, _ string, opts ...lock.Option) (*lock.Lease, error) {
		return e.TryCampaign(ctx, cfg.announce, opts...)
	}
	wait = func(ctx context.Context, _ string, opts ...lock.Option) (*lock.Lease, error) {
		return e.Campaign(ctx, cfg.announce, opts...)
	}
	return try, wait, nil
}
