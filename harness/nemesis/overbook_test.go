package nemesis

import (
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/driver/memory"
	"github.com/dlock-go/dlock/lock"
)

// A negative control of this package's own, for TestTeeth: a driver that
// grants one permit too many. It keeps its grants in a memory Locker over
// the run's Store (viaLocker), and asks that Locker for a permit of a
// semaphore of Limit+1 for each permit of Limit it grants, while the
// leases it grants report the Limit asked for: a full semaphore takes one
// holder more. Its exclusive and shared grants are the memory driver's,
// correct; its tokens are the Store's. The checker must find over-limit
// violations in a short run, and nothing tells them apart from a correct
// driver but counting the permits held at once.
// overbookName is the control's name.
const overbookName = "ctl-memory-overbook"

func init() {
	targets = append(targets, &Target{
		Name: overbookName, Broken: "a permit of a full semaphore granted (Limit+1 for the store)", Shared: true, Permits: true, TTL: time.Second,
		LockTTLs: ms(300*time.Millisecond, time.Second, 2*time.Second), RefreshTTLs: ms(100*time.Millisecond, 300*time.Millisecond, time.Second, 3*time.Second),
		Bound: 3 * time.Second, Recovery: time.Second, ReleaseTimeout: time.Second,
		memory: func(store *memory.Store, o lock.Options) Locker {
			return newVia(store, o, func(d *viaLocker) {
				d.limit = func(l *driver.Lease) int { return l.Limit + 1 } // the bug
			})
		},
	})
}
