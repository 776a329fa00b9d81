package cli

import (
	"os"
	"syscall"
)

// Exit statuses that dlock chooses itself. Every other status of dlock run
// is the command's own (see cmd/dlock's package doc, "Exit status").
const (
	exitOK       = 0
	exitConflict = 1   // default of -E: the key is held (flock's default)
	exitUsage    = 2   // bad flags or arguments, invalid key, TTL or URL
	exitLost     = 124 // the lease was lost: the command was terminated
	exitBackend  = 125 // the backend could not be opened or failed
	exitNoExec   = 126 // the command was found but could not be started
	exitNotFound = 127 // the command was not found
	exitSignal   = 128 // + N: dlock got signal N before the command ran
)

// exitStatus is the shell's view of how a process ended: its exit code, or
// 128+N when signal N killed it.
func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return exitSignal + int(ws.Signal())
	}
	return ps.ExitCode()
}
