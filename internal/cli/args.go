package cli

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
)

// nFlag is dlock run's -n, which is two flags in one: consul lock's -n N,
// the semaphore's number of permits, and flock's -n, fail at once. It is a
// boolean flag to the flag package, so that -n alone parses; parseRun
// then reads a decimal integer after it as N when the rule says so (see
// splitN). -n=N is always the limit.
type nFlag struct {
	bare  bool   // -n alone (or -n=true): flock's nonblock, unless splitN finds N after it
	limit int    // -n=N
	text  string // N as given, for messages
	given bool   // -n=N was given
}

func (n *nFlag) IsBoolFlag() bool { return true }

func (n *nFlag) String() string {
	if n == nil || !n.given {
		return ""
	}
	return strconv.Itoa(n.limit)
}

func (n *nFlag) Set(s string) error {
	if b, err := strconv.ParseBool(s); err == nil && !isDecimal(s) {
		n.bare = b
		return nil
	}
	if !isDecimal(s) {
		return fmt.Errorf("want -n N (N permits) or -n alone (fail at once, like flock -n)")
	}
	v, _ := strconv.Atoi(s) // beyond an int: the largest int, refused by parseRun
	n.limit, n.text, n.given, n.bare = v, s, true, false
	return nil
}

// isDecimal reports whether s is a decimal integer: digits only.
func isDecimal(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// splitFlags splits args where the flag package would stop parsing: the
// flags (with their values) before the first argument that is not one,
// and the rest, which begins with that argument or with "--" (kept, not
// consumed as the flag package would). A flag it does not know is left
// to fs.Parse to report.
func splitFlags(fs *flag.FlagSet, args []string) (flags, rest []string) {
	i := 0
	for i < len(args) {
		a := args[i]
		if a == "--" || len(a) < 2 || a[0] != '-' {
			break
		}
		name, _, hasValue := strings.Cut(strings.TrimPrefix(a[1:], "-"), "=")
		i++
		if f := fs.Lookup(name); f != nil && !hasValue && !isBoolFlag(f) && i < len(args) {
			i++ // the flag's value
		}
	}
	return args[:i], args[i:]
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// isBareN reports whether a is -n alone (or --n).
func isBareN(a string) bool { return a == "-n" || a == "--n" }

// splitN applies the -n rule to what follows a bare -n that ends the
// flags (rest, which starts with a decimal integer): the integer is the
// number of permits when a KEY follows it before the command, that is,
// when rest, after the integer and any further flags, holds an argument
// before "--", or at least two arguments and no "--". Otherwise -n is
// flock's fail-at-once and the integer is the KEY. It returns the flags
// that follow the integer and the positional arguments after them when
// the integer is the limit, and ok false when it is the KEY.
func splitN(fs *flag.FlagSet, rest []string) (moreFlags, positional []string, ok bool) {
	moreFlags, positional = splitFlags(fs, rest[1:])
	dash := -1
	for i, a := range positional {
		if a == "--" {
			dash = i
			break
		}
	}
	if dash >= 1 || (dash < 0 && len(positional) >= 2) {
		return moreFlags, positional, true
	}
	return moreFlags, nil, false
}

// splitCommand reads KEY [--] COMMAND [ARGS...] from the positional
// arguments: the first is the key, the rest the command, after a "--"
// when there is one. A command whose first word starts with "-" needs
// the "--" (without it, it looks like a misplaced flag).
func splitCommand(pos []string) (key string, argv []string, err error) {
	switch {
	case len(pos) == 0:
		return "", nil, usageError("missing KEY and COMMAND")
	case pos[0] == "--":
		return "", nil, usageError("missing KEY before --")
	}
	key, argv = pos[0], pos[1:]
	switch {
	case len(argv) > 0 && argv[0] == "--":
		argv = argv[1:]
		if len(argv) == 0 {
			return "", nil, usageError("missing COMMAND after --")
		}
	case len(argv) == 0:
		return "", nil, usageError("missing COMMAND after KEY %q", key)
	case strings.HasPrefix(argv[0], "-") && argv[0] != "-":
		return "", nil, usageError("got %q after KEY %q: flags go before KEY, and a command whose first word starts with - needs -- before it (KEY -- %s ...)", argv[0], key, argv[0])
	}
	return key, argv, nil
}
