//go:build !chaos_skip_zookeeper

package chaos

import (
	"strings"
	"time"

	_ "github.com/dlock-go/dlock/driver/zookeeper"
)

// zkSession is the session timeout the scenarios ask for (within the test
// servers' 2 to 20 ticks); it bounds how long a silent holder keeps a key.
const zkSession = 2 * time.Second

func init() {
	register(&target{
		name: "zookeeper", backend: ZooKeeperBackend, ttl: time.Second, bound: zkSession,
		open: openURL("zookeeper://%s/chaos?session_timeout=" + zkSession.String()),
		// The lock nodes are "_c_<owner>-lock-<seq>", created by a multi
		// (create plus a setData of the key node, for the czxid) or by a
		// plain create; parents are created on the way, and refreshes are
		// reads of the node.
		grantReq: func(r Request) bool {
			return (r.Cmd == "multi" || strings.HasPrefix(r.Cmd, "create")) && zkLockPath(r)
		},
		releaseReq: func(r Request) bool { return r.Cmd == "delete" && zkLockPath(r) },
		refreshReq: func(r Request) bool { return !r.Mutating && r.Cmd != "ping" && zkLockPath(r) },
	})
}

func zkLockPath(r Request) bool {
	for _, p := range r.Paths {
		if strings.Contains(p, "-lock-") {
			return true
		}
	}
	return false
}
