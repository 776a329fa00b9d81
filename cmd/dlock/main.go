package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/dlock-go/dlock/lock"
)

const mainUsage = `dlock runs a command under a distributed lock, on any dlock backend.

Usage:
  dlock run [flags] KEY [--] COMMAND [ARGS...]  run COMMAND while holding KEY
  dlock demo [flags]                            workers contend for locks on every reachable backend
  dlock inspect [flags] KEY                     who holds KEY and who waits for it (dlock inspect -h)
  dlock help [run|demo]                         this text, or a command's flags
  dlock version                                 dlock's version and Go's (also -version, --version)

Backends compiled in: %s.
The manual: go doc github.com/dlock-go/dlock/cmd/dlock
`

func main() { os.Exit(dispatch(os.Args[1:])) }

func dispatch(args []string) int {
	if len(args) == 0 {
		usage(os.Stderr)
		return exitUsage
	}
	switch args[0] {
	case "run":
		return cmdRun(args[1:])
	case "demo":
		return cmdDemo(args[1:])
	case "inspect":
		return cmdInspect(args[1:])
	case demoWorkerCmd: // hidden: one worker process of dlock demo
		return cmdDemoWorker(args[1:])
	case "version", "-version", "--version":
		fmt.Println(versionLine())
		return exitOK
	case "help", "-h", "-help", "--help":
		if len(args) > 1 && (args[1] == "run" || args[1] == "demo") {
			return dispatch([]string{args[1], "-h"})
		}
		usage(os.Stdout)
		return exitOK
	}
	fmt.Fprintf(os.Stderr, "dlock: unknown command %q\n\n", args[0])
	usage(os.Stderr)
	return exitUsage
}

func usage(w *os.File) {
	fmt.Fprintf(w, mainUsage, strings.Join(lock.Schemes(), ", "))
}
