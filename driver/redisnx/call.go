package redisnx

import (
	"context"

	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/redis/go-redis/v9"
)

// A scriptCall is one run of a script on a lock key: the scripts of an
// uncontended Lock+Unlock (acquire.lua, release.lua), with their command
// built in one allocation. Script.Run boxes each argument in an interface
// (an allocation per string, and per number from 256 up), and copies them
// and the keys to a list of its own; here the list is an array in the
// struct, and on lanes the lock key, the owner and the TTL are fields that
// the arguments point to: go-redis writes a *string or *int64 as what it
// points to, and a pointer boxes for nothing. (A hook prints such an
// argument as an address; only the lanes' own hooks see their commands,
// so without lanes the arguments are the values, boxed.)
type scriptCall struct {
	argv  [maxArgv]any
	n     int
	key   string // KEYS[1], the lock key
	owner string // ARGV[1]
	px    int64
	ptr   bool // the arguments point to key, owner and px
}

// maxArgv is the most a scriptCall sends: EVALSHA, the hash, the number of
// keys, the key and four ARGV, with room for two more.
const maxArgv = 10

// A boxedScript is a script's hash and source, boxed once for scriptCall.
type boxedScript struct{ sha, src any }

func boxed(s *redis.Script, src string) boxedScript { return boxedScript{s.Hash(), src} }

// newCall starts a call on lock key lk for owner (ARGV[1]); add and addPX
// append the rest of ARGV, in order. ptr: see scriptCall.
func newCall(lk, owner string, ptr bool) *scriptCall {
	c := &scriptCall{key: lk, owner: owner, ptr: ptr, n: 5}
	c.argv[2] = 1
	if ptr {
		c.argv[3], c.argv[4] = &c.key, &c.owner
	} else {
		c.argv[3], c.argv[4] = c.key, c.owner
	}
	return c
}

func (c *scriptCall) add(v any) *scriptCall {
	c.argv[c.n] = v
	c.n++
	return c
}

// addPX appends a TTL in milliseconds.
func (c *scriptCall) addPX(px int64) *scriptCall {
	if !c.ptr {
		return c.add(px)
	}
	c.px = px
	return c.add(&c.px)
}

// run sends the call as EVALSHA of s on ls, and once more as EVAL when the
// server answers NOSCRIPT (after a restart or SCRIPT FLUSH), as Script.Run.
func (c *scriptCall) run(ctx context.Context, ls *redisx.Lanes, s boxedScript) *redis.Cmd {
	c.argv[0], c.argv[1] = "evalsha", s.sha
	cmd := ls.Process(ctx, c.cmd(ctx))
	if isNoScript(cmd.Err()) {
		c.argv[0], c.argv[1] = "eval", s.src
		cmd = ls.Process(ctx, c.cmd(ctx))
	}
	return cmd
}

func (c *scriptCall) cmd(ctx context.Context) *redis.Cmd {
	cmd := redis.NewCmd(ctx, c.argv[:c.n]...)
	cmd.SetFirstKeyPos(3) // the lock key: a Cluster's slot, a Ring's shard
	return cmd
}
