package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// waitFlag is -wait: 0 tries once, a duration bounds the wait, "forever"
// (the default) waits until the lock is granted.
type waitFlag struct {
	forever bool
	d       time.Duration
}

func (w *waitFlag) String() string {
	if w.forever {
		return "forever"
	}
	return w.d.String()
}

func (w *waitFlag) Set(s string) error {
	if strings.TrimSpace(s) == "forever" {
		*w = waitFlag{forever: true}
		return nil
	}
	d, err := parseDuration(s)
	if err != nil {
		return fmt.Errorf("want 0, a duration such as 30s, seconds, or forever")
	}
	if d < 0 {
		return fmt.Errorf("negative wait %v", d)
	}
	*w = waitFlag{d: d}
	return nil
}

// parseDuration reads a Go duration (30s, 1m30s) or a plain number of
// seconds (30, 1.5), as flock -w takes it.
func parseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if d, err := time.ParseDuration(s); err == nil {
		return d, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.Abs(f) > 1e9 {
		return 0, fmt.Errorf("want a duration such as 30s or 1m30s, or seconds")
	}
	return time.Duration(f * float64(time.Second)), nil
}

// durationValue is a duration flag that also takes plain seconds: -ttl 30
// is 30s, as -w 30 is, and -ttl 1m30s works too.
type durationValue time.Duration

// durationVar defines a duration flag of fs that takes plain seconds too.
func durationVar(fs *flag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var((*durationValue)(p), name, usage)
}

func (d *durationValue) String() string { return time.Duration(*d).String() }

func (d *durationValue) Set(s string) error {
	v, err := parseDuration(s)
	if err != nil {
		return err
	}
	*d = durationValue(v)
	return nil
}

// once reports whether -wait asks for a single attempt.
func (w waitFlag) once() bool { return !w.forever && w.d == 0 }

// exitCodeFlag is an exit status, 0 to 255.
type exitCodeFlag int

func (c *exitCodeFlag) String() string { return strconv.Itoa(int(*c)) }

func (c *exitCodeFlag) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > 255 {
		return fmt.Errorf("want an exit status from 0 to 255")
	}
	*c = exitCodeFlag(n)
	return nil
}

// newFlagSet returns a flag set that prints nothing itself: parseFlags
// returns its errors, and -h as a *helpErr, for the command to report
// (see parseFailed).
func newFlagSet(name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fmt.Fprintln(fs.Output(), "\nFlags:")
		fs.PrintDefaults()
	}
	return fs
}

// helpErr is what parseFlags returns for -h and -help: the command prints
// its usage, asked for, on stdout and exits 0.
type helpErr struct{ fs *flag.FlagSet }

func (h *helpErr) Error() string { return flag.ErrHelp.Error() }
func (h *helpErr) Unwrap() error { return flag.ErrHelp }

// print writes the usage and the flags to w.
func (h *helpErr) print(w io.Writer) {
	h.fs.SetOutput(w)
	h.fs.Usage()
	h.fs.SetOutput(io.Discard)
}

// parseFlags parses args with fs (from newFlagSet): nil, a *helpErr for
// -h, or the flag package's one-line error.
func parseFlags(fs *flag.FlagSet, args []string) error {
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		return &helpErr{fs}
	}
	return err
}

// parseFailed reports err, from parsing the command line of cmd ("run",
// "demo", "inspect"), and returns the exit status: for -h, the usage on
// stdout and 0; for any other error, one line and a hint on stderr, and 2.
func parseFailed(cmd string, err error, stdout, stderr io.Writer) int {
	var h *helpErr
	if errors.As(err, &h) {
		h.print(stdout)
		return exitOK
	}
	fmt.Fprintf(stderr, "dlock %s: %v\n(dlock %s -h for help)\n", cmd, err, cmd)
	return exitUsage
}
