package nemesis

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/dlock-go/dlock/harness/chaos"
	"github.com/redis/go-redis/v9"
)

// acl-rpush: for a while, the servers' default user (the Lockers') may not
// RPUSH, as a user with the ACL rules of a release before grant lists (a
// deployment mid-upgrade). Every push of redisnx's scripts (a hand-over's
// grant, a waiter's "x") is refused inside a script that may have written
// already: the script must go on (redis.pcall) and wake the waiter on its
// inbox instead; LLEN and BLPOP are still allowed, so the Lockers keep
// their grant lists (turning them off for good is driver/redisnx's
// refused.go, tested there). A Lock or Unlock that fails with a command
// refused inside a script is an unexpected-error: the script stopped after
// its writes (Redis does not roll a script back).

// aclKinds adds acl-rpush on the redisnx targets.
func (n *nemesis) aclKinds(add func(name string, w int, inject func() bool)) {
	if n.r.tg.Backend != chaos.RedisBackend || !strings.HasPrefix(n.r.tg.Name, "redisnx") {
		return
	}
	add("acl-rpush", 2, n.aclRPush)
}

// aclRPush refuses RPUSH to the default user on every server for 0.5 to
// 3 s, then allows it again (until it is allowed, or the run stops: a
// restarted server has forgotten the rule anyway).
func (n *nemesis) aclRPush() bool {
	d := n.between(500*time.Millisecond, 3*time.Second)
	n.spawn(func() {
		n.setRPush("-rpush")
		n.sleep(d)
		for !n.setRPush("+rpush") && !n.stopped() {
			n.sleep(200 * time.Millisecond)
		}
	})
	return true
}

// setRPush applies rule to the default user on every server; it reports
// whether every server took it.
func (n *nemesis) setRPush(rule string) bool {
	ok := true
	for _, addr := range n.r.srv.Addrs {
		c := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true, MaxRetries: -1})
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		ok = c.ACLSetUser(ctx, "default", rule).Err() == nil && ok
		cancel()
		c.Close()
	}
	return ok
}

// scriptRefused reports whether err is a Redis script's error reply for a
// command the ACL refused inside it (Redis 7.0 and 7.2 wordings).
func scriptRefused(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) || !strings.Contains(re.Error(), "@user_script") {
		return false
	}
	m := re.Error()
	return strings.Contains(m, "can't run this command") || strings.Contains(m, "ACL failure") || strings.Contains(m, "NOPERM")
}
