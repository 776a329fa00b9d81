package nemesis

import (
	"time"

	"github.com/dlock-go/dlock/driver/memory"
	"github.com/dlock-go/dlock/lock"
)

// A negative control of this package's own, for the leader election: a
// leader whose Done comes late. The memory driver's leases, none renewed
// (so that terms are lost), with each term's Done, as the leader sees
// it, closing 400ms after the term was lost. Its grants, tokens and
// every other lease are correct: only the term check, which judges each
// term from its grant to when its leader saw its Done closed, tells the
// next leader elected meanwhile (the lease watchers' done-late sees the
// late Done too).
const leaderLateName = "ctl-memory-leader-late"

func init() {
	targets = append(targets, &Target{
		Name: leaderLateName, Broken: "a lost term's Done closes 400ms late (the leader acts meanwhile)", Shared: true, Permits: true, TTL: time.Second,
		LockTTLs: ms(300*time.Millisecond, 600*time.Millisecond), RefreshTTLs: ms(100*time.Millisecond, 300*time.Millisecond, 600*time.Millisecond),
		Bound: time.Second, Recovery: time.Second, ReleaseTimeout: time.Second,
		memory: func(store *memory.Store, o lock.Options) Locker {
			o.DisableAutoRenew = true
			return memory.New(store, &o)
		},
		view: func(op string, l *lock.Lease) leaseView {
			if op != "campaign" && op != "trycampaign" {
				return l
			}
			return &brokenLease{Lease: l, late: delayedDone(l, 400*time.Millisecond, isLost)} // the bug
		},
	})
	mustFind[leaderLateName] = "term"
}
