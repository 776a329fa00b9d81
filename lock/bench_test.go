package lock_test

import (
	"context"
	"testing"

	"github.com/dlock-go/dlock/driver/memory"
)

// BenchmarkLockUnlock is the client's cost of one uncontended Lock+Unlock
// cycle with the defaults (auto-renewal on), on the in-process driver, so
// that lock's own work (allocations, goroutines, the renewal scheduler) is
// what it measures. Compare runs with benchstat.
func BenchmarkLockUnlock(b *testing.B) {
	for _, c := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
	}{
		{"Background", func() (context.Context, context.CancelFunc) { return context.Background(), func() {} }},
		{"WithCancel", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			l := memory.New(memory.NewStore(), nil)
			defer l.Close()
			ctx, cancel := c.ctx()
			defer cancel()
			b.ReportAllocs()
			for b.Loop() {
				lease, err := l.Lock(ctx, "bench")
				if err != nil {
					b.Fatal(err)
				}
				if err := lease.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
