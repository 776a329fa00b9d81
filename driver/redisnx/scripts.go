package redisnx

import (
	_ "embed"
	"strings"

	"github.com/dlock-go/dlock/internal/redisx"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts, one per operation; those that may grant the key take
// the functions of prelude.lua (fencing tokens, the hand-over to the queue)
// where they say (see compose). Script.Run
// sends EVALSHA (one round trip) and falls back to EVAL once when the server
// answers NOSCRIPT (after a restart or SCRIPT FLUSH).
var (
	//go:embed prelude.lua
	preludeLua string
	//go:embed acquire.lua
	acquireLua string
	//go:embed wait.lua
	waitLua string
	//go:embed leave.lua
	leaveLua string
	//go:embed release.lua
	releaseLua string
	//go:embed refresh.lua
	refreshLua string
	//go:embed resume.lua
	resumeLua string

	acquireSrc    = suffixes.Replace(compose(acquireLua))
	releaseSrc    = suffixes.Replace(compose(releaseLua))
	acquireScript = redis.NewScript(acquireSrc)
	waitScript    = redis.NewScript(compose(waitLua))
	leaveScript   = redis.NewScript(compose(leaveLua))
	releaseScript = redis.NewScript(releaseSrc)
	refreshScript = redis.NewScript(refreshLua)
	resumeScript  = redis.NewScript(resumeLua)

	// The scripts of an uncontended Lock+Unlock, sent as scriptCalls.
	acquireBoxed = boxed(acquireScript, acquireSrc)
	releaseBoxed = boxed(releaseScript, releaseSrc)
)

// suffixes puts the suffixes of a key's names (keys.go) where acquire.lua
// and release.lua, which are sent the lock key alone (a boxed argument
// less per name and call), make the names of the others from it.
var suffixes = strings.NewReplacer(
	"{{counter}}", counterSuffix,
	"{{void}}", redisx.VoidInfix,
	"{{queue}}", queueSuffix,
	"{{entries}}", entriesSuffix,
	"{{readers}}", readersSuffix,
	"{{channel}}", channelSuffix,
	"{{watchqueue}}", redisx.WatchQueueSuffix,
	"{{listen}}", redisx.ListenSuffix,
)

// compose puts the two parts of prelude.lua into script, in place of its
// lines "--@fence" (next_token) and "--@queue" (the queue's functions).
func compose(script string) string {
	fence, queue, ok := strings.Cut(preludeLua, "--@queue\n")
	if !ok || strings.Count(script, "--@fence\n") != 1 || strings.Count(script, "--@queue\n") != 1 {
		panic("redisnx: a script without its --@fence and --@queue lines")
	}
	script = strings.Replace(script, "--@fence\n", fence, 1)
	return strings.Replace(script, "--@queue\n", queue, 1)
}

// isNoScript reports whether err is the server's NOSCRIPT reply.
func isNoScript(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}
