package nemesis

import (
	"bytes"
	"strings"
	"time"

	"github.com/dlock-go/dlock/harness/chaos"
)

// The grant lists of redisnx's waits (driver/redisnx, list.go): a queued
// waiter blocks on a list of its own with BLPOP, and the release that
// hands it the key pushes the grant there, so that the BLPOP's reply is
// the grant. Two faults reach it: blpop-held holds the reply of a BLPOP
// that took a grant (past the shorter leases' TTLs: the waiter must not
// count on more validity than the push left it), and blpop-lost loses the
// reply of a BLPOP (the server popped the grant; the waiter must find it
// again by its next step, or pass it on when it leaves).

// blpopKinds adds the grant-list faults on the targets whose waiters
// block on grant lists.
func (n *nemesis) blpopKinds(add func(name string, w int, inject func() bool)) {
	if n.r.tg.Backend != chaos.RedisBackend || !strings.HasPrefix(n.r.tg.Name, "redisnx") {
		return
	}
	add("blpop-held", 3, n.blpopHeld)
	add("blpop-lost", 3, n.blpopLost)
}

// blpopGrant reports whether frame is a BLPOP reply that took something
// (a two-element array: the list and the value), not a timeout.
func blpopGrant(_ chaos.Request, frame []byte) bool {
	return bytes.HasPrefix(frame, []byte("*2\r\n"))
}

// blpopHeld holds the replies of one client's next one to three BLPOPs
// that took a grant for up to 2.5s.
func (n *nemesis) blpopHeld() bool {
	s := pick(n.rng, n.clientSlots())
	lo, hi := n.ttlRange()
	hold := n.between(lo/4, min(hi, 2500*time.Millisecond)+time.Millisecond)
	count := 1 + n.rng.IntN(3)
	d := n.between(500*time.Millisecond, 3*time.Second)
	n.spawn(func() {
		stop := n.r.armHold(s.proxies, s.name, "blpop", count, hold, blpopGrant)
		n.sleep(d)
		stop()
	})
	return true
}

// blpopLost loses the replies of one client's next one to four BLPOPs
// (the proxy closes the connection: go-redis does not send it again).
func (n *nemesis) blpopLost() bool {
	s := pick(n.rng, n.clientSlots())
	count := 1 + n.rng.IntN(4)
	d := n.between(500*time.Millisecond, 3*time.Second)
	n.spawn(func() {
		stop := n.r.armDrop(s.proxies, s.name, "blpop", count)
		n.sleep(d)
		stop()
	})
	return true
}
