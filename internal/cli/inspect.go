package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/dlock-go/dlock/lock"
)

const inspectUsage = `Usage: dlock inspect [flags] KEY

Shows who holds KEY on the backend named by -url or $DLOCK_URL, and who
waits for it: one line per holder and per queued waiter, with its mode,
owner, fencing token, time left and since when, as far as the backend can
tell ("?" where it cannot). It changes nothing on the backend.
Exit status: 0 when KEY is held, 1 when it is free, 2 on usage errors,
125 when the backend could not be reached or failed.
`

// inspectConfig is a parsed dlock inspect command line.
type inspectConfig struct {
	url     string
	key     string
	json    bool
	timeout time.Duration
}

// inspectTimeout is how long dlock inspect gives the backend by default:
// opening it and one read.
const inspectTimeout = 10 * time.Second

func parseInspect(args []string, stderr io.Writer) (*inspectConfig, error) {
	cfg := &inspectConfig{}
	fs := newFlagSet("inspect", inspectUsage)
	// Not os.Getenv("DLOCK_URL") as the flag's default: -h prints
	// defaults, and the URL may carry a password (as for dlock run).
	urlHelp := "backend URL (default $DLOCK_URL), e.g. redisnx://localhost:6379"
	if env := os.Getenv("DLOCK_URL"); env != "" {
		urlHelp = fmt.Sprintf("backend URL (default $DLOCK_URL, now %s)", backendName(env))
	}
	fs.StringVar(&cfg.url, "url", "", urlHelp)
	fs.BoolVar(&cfg.json, "json", false, "print a JSON object instead of lines")
	durationVar(fs, &cfg.timeout, "timeout", inspectTimeout, "give up on the backend after this long, a `duration` or seconds")
	var lf logFlags
	lf.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["url"] {
		cfg.url = os.Getenv("DLOCK_URL")
	}
	switch rest := fs.Args(); {
	case len(rest) == 0:
		return nil, usageError("missing KEY")
	case len(rest) > 1:
		return nil, usageError("want one KEY, got %d arguments (flags go before KEY)", len(rest))
	default:
		cfg.key = rest[0]
	}
	if cfg.url == "" {
		return nil, usageError("no backend: set -url or DLOCK_URL, e.g. redisnx://localhost:6379")
	}
	if msg := notCompiledIn(cfg.url); msg != "" {
		return nil, usageError("backend URL %q: %s", backendNameRaw(cfg.url), msg)
	}
	if cfg.timeout <= 0 {
		return nil, usageError("-timeout %v: want a positive duration", cfg.timeout)
	}
	log, err := lf.logger(stderr)
	if err != nil {
		return nil, usageError("%v", err)
	}
	routeLibraryLogs(log)
	return cfg, nil
}

// cmdInspect is dlock inspect. It returns the exit status.
func cmdInspect(args []string) int {
	urls := append(argURLs(args), os.Getenv("DLOCK_URL"))
	stderr := scrubbing(os.Stderr, urls...)
	cfg, err := parseInspect(args, stderr)
	if err != nil {
		return parseFailed("inspect", err, scrubbing(os.Stdout, urls...), stderr)
	}
	return cfg.run(os.Stdout, stderr)
}

func (cfg *inspectConfig) run(stdout, stderr io.Writer) int {
	fail := func(code int, format string, args ...any) int {
		fmt.Fprintf(stderr, "dlock: "+format+"\n", args...)
		return code
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	locker, err := lock.Open(ctx, cfg.url)
	if err != nil {
		if errors.Is(err, lock.ErrInvalid) {
			return fail(exitUsage, "%v", err)
		}
		return fail(exitBackend, "opening %s: %v", backendName(cfg.url), err)
	}
	defer locker.Close()
	st, err := locker.Inspect(ctx, cfg.key)
	switch {
	case errors.Is(err, lock.ErrInvalid):
		return fail(exitUsage, "%v", err)
	case err != nil:
		return fail(exitBackend, "inspecting %q on %s: %v", cfg.key, backendName(cfg.url), err)
	}
	if cfg.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(jsonState(st)); err != nil {
			return fail(exitBackend, "writing the answer: %v", err)
		}
	} else {
		printState(stdout, st, backendName(cfg.url))
	}
	if st.Held() {
		return exitOK
	}
	return exitConflict // 1: free
}

// printState writes st as a heading and one line per holder and waiter.
func printState(w io.Writer, st *lock.KeyState, backend string) {
	switch {
	case st.Held():
		fmt.Fprintf(w, "%q on %s: held (%s)", st.Key, backend, count(len(st.Holders), "holder"))
	default:
		fmt.Fprintf(w, "%q on %s: free", st.Key, backend)
	}
	switch {
	case st.Unknown.Waiters:
		fmt.Fprintf(w, "; waiters unknown (this backend keeps no queue)\n")
	case st.MoreWaiters:
		fmt.Fprintf(w, "; more than %s\n", count(len(st.Waiters), "waiter"))
	default:
		fmt.Fprintf(w, "; %s\n", count(len(st.Waiters), "waiter"))
	}
	if len(st.Holders)+len(st.Waiters) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\tMODE\tOWNER\tTOKEN\tREMAINING\tSINCE")
	for _, h := range st.Holders {
		owner := h.Owner
		switch {
		case h.Foreign:
			owner = strconv.Quote(owner) + " (foreign)"
		case h.Holds > 0:
			owner += fmt.Sprintf(" (named, %s)", count(h.Holds, "hold"))
		}
		if h.Note != "" {
			owner += " (note " + strconv.Quote(h.Note) + ")"
		}
		token := "?"
		if h.Token != 0 {
			token = strconv.FormatUint(h.Token, 10)
		}
		remaining := "?"
		switch {
		case h.Remaining == lock.NoExpiry:
			remaining = "never expires"
		case h.Remaining > 0:
			remaining = h.Remaining.Round(time.Millisecond).String()
		}
		fmt.Fprintf(tw, "holder\t%s\t%s\t%s\t%s\t%s\n", mode(h.Mode, h.Limit), owner, token, remaining, since(h.Since))
	}
	for _, wt := range st.Waiters {
		fmt.Fprintf(tw, "waiter\t%s\t%s\t-\t-\t%s\n", mode(wt.Mode, wt.Limit), wt.Owner, since(wt.Since))
	}
	tw.Flush()
}

func count(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

// mode is a grant's mode, with a permit's limit ("permit/4").
func mode(m lock.Mode, limit int) string {
	if m == lock.Permit {
		return m.String() + "/" + strconv.Itoa(limit)
	}
	return m.String()
}

func since(t time.Time) string {
	if t.IsZero() {
		return "?"
	}
	return t.Local().Format("2006-01-02T15:04:05.000Z07:00")
}

// The JSON form of a KeyState: fields the backend could not tell are left
// out (unknown lists which), times are RFC 3339, durations milliseconds.
type (
	jsonKeyState struct {
		Key         string       `json:"key"`
		Held        bool         `json:"held"`
		Holders     []jsonHolder `json:"holders"`
		Waiters     []jsonWaiter `json:"waiters"`
		MoreWaiters bool         `json:"more_waiters,omitempty"`
		Unknown     []string     `json:"unknown,omitempty"`
	}
	jsonHolder struct {
		Mode        string     `json:"mode"`
		Limit       int        `json:"limit,omitempty"`
		Owner       string     `json:"owner"`
		Holds       int        `json:"holds,omitempty"`
		Foreign     bool       `json:"foreign,omitempty"`
		Token       uint64     `json:"token,omitempty"`
		RemainingMS *int64     `json:"remaining_ms,omitempty"`
		NoExpiry    bool       `json:"no_expiry,omitempty"`
		Since       *time.Time `json:"since,omitempty"`
		Note        string     `json:"note,omitempty"`
	}
	jsonWaiter struct {
		Mode  string     `json:"mode"`
		Limit int        `json:"limit,omitempty"`
		Owner string     `json:"owner"`
		Since *time.Time `json:"since,omitempty"`
	}
)

func jsonState(st *lock.KeyState) jsonKeyState {
	j := jsonKeyState{Key: st.Key, Held: st.Held(), Holders: []jsonHolder{}, Waiters: []jsonWaiter{}, MoreWaiters: st.MoreWaiters}
	for _, u := range []struct {
		set  bool
		name string
	}{{st.Unknown.Remaining, "remaining"}, {st.Unknown.Tokens, "tokens"}, {st.Unknown.Since, "since"}, {st.Unknown.Waiters, "waiters"}} {
		if u.set {
			j.Unknown = append(j.Unknown, u.name)
		}
	}
	for _, h := range st.Holders {
		jh := jsonHolder{Mode: h.Mode.String(), Limit: h.Limit, Owner: h.Owner, Holds: h.Holds, Foreign: h.Foreign, Token: h.Token, NoExpiry: h.Remaining == lock.NoExpiry, Since: timePtr(h.Since), Note: h.Note}
		if h.Remaining > 0 {
			ms := h.Remaining.Milliseconds()
			jh.RemainingMS = &ms
		}
		j.Holders = append(j.Holders, jh)
	}
	for _, w := range st.Waiters {
		j.Waiters = append(j.Waiters, jsonWaiter{Mode: w.Mode.String(), Limit: w.Limit, Owner: w.Owner, Since: timePtr(w.Since)})
	}
	return j
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
