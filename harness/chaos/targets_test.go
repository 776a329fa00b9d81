package chaos

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// A target is what the scenarios run against: a dlock driver, or a
// negative control (a known-broken algorithm as a test-only driver).
type target struct {
	name    string
	backend Backend
	control bool
	// ttl is the lease TTL scenarios use; bound is how long a grant can
	// outlive a holder that stopped renewing (the TTL, or ZooKeeper's
	// session timeout).
	ttl, bound time.Duration
	// open makes a Locker with its own client(s) to addrs; the Locker owns
	// them. h reaches into control drivers.
	open func(ctx context.Context, addrs []string, ttl time.Duration, h Hooks) (Locker, error)
	// gaps are the checkpoints inside the algorithm ("acquire-gap",
	// "release-gap"): the non-atomic steps of a control.
	gaps []string
	// Requests whose reply the lost-reply scenarios drop; nil: the first
	// mutating request (scenarios arrange that it is the one under test).
	grantReq, releaseReq, refreshReq func(Request) bool
	// catches: for a control, the scenarios that must catch it and the
	// check that it was caught for its own reason.
	catches map[string]func(r Row) error
}

var targets []*target

func register(t *target) {
	if t.bound == 0 {
		t.bound = t.ttl
	}
	targets = append(targets, t)
}

func targetByName(name string) *target {
	for _, t := range targets {
		if t.name == name {
			return t
		}
	}
	return nil
}

func (t *target) hasGap(g string) bool {
	for _, x := range t.gaps {
		if x == g {
			return true
		}
	}
	return false
}

func mutating(r Request) bool { return r.Mutating }

func (t *target) pred(p func(Request) bool) func(Request) bool {
	if p == nil {
		return mutating
	}
	return p
}

// openURL returns an open function for a driver's URL scheme; format has
// one %s for the comma-separated addresses, and ttl is added as a query
// parameter.
func openURL(format string) func(ctx context.Context, addrs []string, ttl time.Duration, h Hooks) (Locker, error) {
	return func(ctx context.Context, addrs []string, ttl time.Duration, h Hooks) (Locker, error) {
		u := fmt.Sprintf(format, strings.Join(addrs, ","))
		if strings.HasPrefix(u, "zookeeper://") {
			return lock.Open(ctx, u) // a grant lasts its session: ttl= is refused
		}
		sep := "?"
		if strings.Contains(u, "?") {
			sep = "&"
		}
		return lock.Open(ctx, u+sep+"ttl="+url.QueryEscape(ttl.String()))
	}
}
