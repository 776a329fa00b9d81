package postgres

import (
	"context"
	"fmt"
	"testing"

	"github.com/dlock-go/dlock/lock"
)

// BenchmarkTryLockUnlock measures one TryLock and its Unlock (two steps,
// each one round trip) on a key of its own, straight to the server.
func BenchmarkTryLockUnlock(b *testing.B) {
	l := newTestLocker(b, serverURL(b), &lock.Options{DisableAutoRenew: true}, &netCut{})
	ctx := context.Background()
	prefix := auditKey("bench-trylock")
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		ls, err := l.TryLock(ctx, fmt.Sprintf("%s/%d", prefix, i%64))
		if err != nil {
			b.Fatal(err)
		}
		if err := ls.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
