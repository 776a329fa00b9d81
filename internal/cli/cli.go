// Package cli is the dlock command: cmd/dlock, a module of its own, is a
// main function that calls Main and the blank imports of every driver
// (internal/cli/drivers, and etcd's, a module of its own too). The manual
// is cmd/dlock's package doc.
package cli

import (
	"fmt"
	"os"
	"strings"

	"github.com/dlock-go/dlock/lock"
)

const mainUsage = `dlock runs a command under a distributed lock, on any dlock backend.

Usage:
  dlock run [flags] KEY [--] COMMAND [ARGS...]     run COMMAND while holding KEY
  dlock elect [flags] NAME [--] COMMAND [ARGS...]  run COMMAND while this instance leads the election NAME
  dlock demo [flags]                               workers contend for locks on every reachable backend (make demo's build only)
  dlock inspect [flags] KEY                        who holds KEY and who waits for it (dlock inspect -h)
  dlock schema [URL]                               the SQL that creates the backend's schema (PostgreSQL)
  dlock help [run|elect|demo|inspect|schema]       this text, or a command's flags
  dlock version                                    dlock's version and Go's (also -version, --version)

Backends compiled in: %s.
The manual: go doc github.com/dlock-go/dlock/cmd/dlock
`

// Main runs dlock with args (the arguments after the program's name) and
// returns its exit status. The backends are those whose drivers the
// program imports.
func Main(args []string) int { return dispatch(args) }

func dispatch(args []string) int {
	if len(args) == 0 {
		usage(os.Stderr)
		return exitUsage
	}
	switch args[0] {
	case "run":
		return cmdRun(args[1:])
	case "elect":
		return cmdElect(args[1:])
	case "demo":
		return cmdDemo(args[1:])
	case "inspect":
		return cmdInspect(args[1:])
	case "schema":
		return cmdSchema(args[1:])
	case demoWorkerCmd: // hidden: one worker process of dlock demo
		return cmdDemoWorker(args[1:])
	case "version", "-version", "--version":
		fmt.Println(versionLine())
		return exitOK
	case "help", "-h", "-help", "--help":
		switch {
		case len(args) == 1:
			usage(os.Stdout)
			return exitOK
		case args[1] == "run" || args[1] == "elect" || args[1] == "demo" || args[1] == "inspect" || args[1] == "schema":
			return dispatch([]string{args[1], "-h"})
		}
		fmt.Fprintf(os.Stderr, "dlock help: no command %q: run, elect, demo, inspect or schema\n(dlock help for the commands)\n", args[1])
		return exitUsage
	}
	fmt.Fprintf(os.Stderr, "dlock: unknown command %q\n(dlock help for the commands)\n", args[0])
	return exitUsage
}

// demoWorkerCmd is the hidden subcommand that dlock demo re-executes itself
// with, once per worker process.
const demoWorkerCmd = "demo-worker"

// demoMissing says how to get a dlock with the demo. The demo (worker
// processes, a fenced resource, fault injection, and the test servers it
// can start) is compiled in only with -tags demo, as make demo builds it:
// the dlock users install carries none of it.
const demoMissing = `dlock demo: this dlock was built without the demo.
From a clone of the repository, make demo builds bin/dlock with it
(go build -tags demo -o bin/dlock ./cmd/dlock) and runs it on local servers.
`

func usage(w *os.File) {
	fmt.Fprintf(w, mainUsage, strings.Join(lock.Schemes(), ", "))
}
