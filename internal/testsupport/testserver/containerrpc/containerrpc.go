// Package containerrpc is the protocol between testserver's "docker"
// provider and its helper, dlock-containers (harness/cmd/dlock-containers):
// net/rpc calls with the JSON-RPC 1.0 codec (net/rpc/jsonrpc) over the
// helper's standard input and output. It holds only the service's name,
// its methods' names and their argument and reply types, so that both ends
// agree on them; it uses the standard library only, like the rest of the
// main module's test harness.
//
// The methods of the service Containers, each "Containers.<Method>":
//
//	Hello     Empty      -> Hello       protocol version and helper pid
//	Connect   Empty      -> Engine      connect to the Docker engine (once; later calls repeat the result)
//	Image     ImageArgs  -> Empty       make sure the image is on the engine, pulling it if missing
//	Create    CreateArgs -> ID          create a container, not started
//	Start     ID         -> Empty       start it (no readiness wait: the caller probes)
//	State     ID         -> State       running, paused, exit code; Found false once removed
//	Pause     ID         -> Empty       docker pause (cgroup freezer)
//	Unpause   ID         -> Empty       docker unpause
//	Kill      ID         -> Empty       SIGKILL, then wait until exited; not running is no error
//	Stop      ID         -> Empty       docker stop, 5 s grace, then wait until exited
//	Remove    ID         -> Empty       force-remove with its anonymous volumes
//	Logs      LogsArgs   -> Logs        the last lines of its stdout and stderr
//	Exec      ExecArgs   -> ExecReply   run a command in it: exit code, combined output
//
// Errors are returned as net/rpc's ServerError strings. When its standard
// input ends, the helper removes every container it created and exits.
package containerrpc

// Service is the net/rpc service name.
const Service = "Containers"

// Protocol is the version of this protocol; Hello returns the helper's, and
// a client refuses a helper that speaks another (a stale binary).
const Protocol = 1

// Empty is the argument or reply of methods that need none.
type Empty struct{}

// Hello is the reply of Hello.
type Hello struct {
	Protocol int
	PID      int
}

// Engine describes the Docker engine the helper is connected to.
type Engine struct {
	Version string // the engine's server version
	Desktop bool   // Docker Desktop: host networking must be enabled by the user
}

// ImageArgs names an image, and the environment variable that chose it
// (for the error message when the image is missing and cannot be pulled).
type ImageArgs struct {
	Image  string
	EnvVar string
}

// File is a file written into a container before it starts.
type File struct {
	Path string
	Data []byte
	Mode int64
}

// CreateArgs describes a container to create.
type CreateArgs struct {
	Image       string
	Name        string
	Entrypoint  []string
	Cmd         []string
	Files       []File
	Labels      map[string]string // added to the helper's own labels
	HostNetwork bool
}

// ID names a container.
type ID struct {
	ID string
}

// State is a container's state. Found is false when the engine does not
// know the container (it was removed).
type State struct {
	Found    bool
	Running  bool // also true while paused
	Paused   bool
	ExitCode int
	Status   string // "created", "running", "paused", "exited", ...
}

// LogsArgs asks for the last Lines lines of a container's output.
type LogsArgs struct {
	ID    string
	Lines int
}

// Logs is the reply of Logs: stdout and stderr, interleaved.
type Logs struct {
	Text string
}

// ExecArgs is a command to run in a container.
type ExecArgs struct {
	ID  string
	Cmd []string
}

// ExecReply is the result of Exec.
type ExecReply struct {
	ExitCode int
	Output   string // stdout and stderr, combined
}
