package redisnx

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts, one per operation. Script.Run sends EVALSHA (one round
// trip) and falls back to EVAL once when the server answers NOSCRIPT (after
// a restart or SCRIPT FLUSH).
var (
	//go:embed acquire.lua
	acquireLua string
	//go:embed release.lua
	releaseLua string
	//go:embed refresh.lua
	refreshLua string

	acquireScript = redis.NewScript(acquireLua)
	releaseScript = redis.NewScript(releaseLua)
	refreshScript = redis.NewScript(refreshLua)
)

// isNoScript reports whether err is the server's NOSCRIPT reply.
func isNoScript(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}
