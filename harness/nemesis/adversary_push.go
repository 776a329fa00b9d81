package nemesis

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/redisx"
)

// The adversary's attempt to grant through redisnx's grant lists
// (driver/redisnx, list.go): a pub/sub-only client that heard a key's
// channel (P{K}:rel) and a waiter's owner (a wake-up on an inbox; else a
// guess) pushes
// a forged grant, "NONCE TOKEN", to lists named as the waiter's would be,
// P{K}:g:OWNER:NONCE. The server must refuse every push (NOPERM: the user
// may write no key); one that is not refused is reported as a harness
// problem, and the checker judges whatever it granted.

// pushLocked, at random, forges a grant-list push from message h.
func (a *adversary) pushLocked(h heard) {
	if a.rng.IntN(4) != 0 {
		return
	}
	lk, ok := strings.CutSuffix(h.ch, redisx.ChannelSuffix)
	if !ok {
		return
	}
	owner := fmt.Sprintf("%016x%016x", a.rng.Uint64(), a.rng.Uint64()) // a guess, when no waiter was heard of
	if len(a.waiters) > 0 {
		owner = a.waiters[a.rng.IntN(len(a.waiters))].payload
	}
	nonce := a.rng.Uint64()
	list := fmt.Sprintf("%s:g:%s:%d", lk, owner, nonce)
	value := fmt.Sprintf("%d %d", nonce, uint64(time.Now().UnixMicro())+uint64(a.rng.IntN(1000)))
	pub := a.pub
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		if closed(a.stop) || pub == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := pub.RPush(ctx, list, value).Err()
		cancel()
		switch {
		case err == nil:
			a.r.problem("adversary: a pub/sub-only client pushed %q to %s", value, list)
			a.count("push-accepted")
		case strings.Contains(err.Error(), "NOPERM"):
			a.count("push-refused")
		default:
			a.count("push-failed")
		}
	}()
}
