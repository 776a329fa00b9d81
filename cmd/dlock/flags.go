package main

import (
	"flag"
	"fmt"
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
	s = strings.TrimSpace(s)
	if s == "forever" {
		*w = waitFlag{forever: true}
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		// A bare number is seconds, as in flock -w.
		f, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil || f != f || f > 1e9 {
			return fmt.Errorf("want 0, a duration such as 30s, seconds, or forever")
		}
		d = time.Duration(f * float64(time.Second))
	}
	if d < 0 {
		return fmt.Errorf("negative wait %v", d)
	}
	*w = waitFlag{d: d}
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

// urlsFlag collects a repeated -url.
type urlsFlag []string

func (u *urlsFlag) String() string { return strings.Join(*u, " ") }

func (u *urlsFlag) Set(s string) error {
	if s == "" {
		return fmt.Errorf("empty URL")
	}
	*u = append(*u, s)
	return nil
}

// newFlagSet returns a flag set that reports errors instead of exiting and
// prints usage, then the flags, on -h.
func newFlagSet(name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fmt.Fprintln(fs.Output(), "\nFlags:")
		fs.PrintDefaults()
	}
	return fs
}
