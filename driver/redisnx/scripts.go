package redisnx

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts, one per operation; those that may grant the key start
// with prelude.lua (fencing tokens, the hand-over to the queue). Script.Run
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

	acquireScript = redis.NewScript(preludeLua + acquireLua)
	waitScript    = redis.NewScript(preludeLua + waitLua)
	leaveScript   = redis.NewScript(preludeLua + leaveLua)
	releaseScript = redis.NewScript(preludeLua + releaseLua)
	refreshScript = redis.NewScript(refreshLua)
)

// isNoScript reports whether err is the server's NOSCRIPT reply.
func isNoScript(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}
