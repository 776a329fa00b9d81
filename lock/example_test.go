package lock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/dlock-go/dlock/driver/memory"
	"github.com/dlock-go/dlock/lock"
)

// The examples run on the in-process memory driver; every driver works
// the same way.

func ExampleOpen() {
	ctx := context.Background()
	locker, err := lock.Open(ctx, "memory://example?ttl=10s")
	if err != nil {
		panic(err)
	}
	defer locker.Close()
	lease, err := locker.Lock(ctx, "nightly-report")
	if err != nil {
		panic(err)
	}
	fmt.Println(lease.Key(), lease.TTL())
	lease.Unlock(ctx)

	_, err = lock.Open(ctx, "memory://example?tll=10s")
	fmt.Println(errors.Is(err, lock.ErrInvalid))
	// Output:
	// nightly-report 10s
	// true
}

func ExampleDo() {
	ctx := context.Background()
	locker := memory.New(memory.NewStore(), nil)
	defer locker.Close()
	err := lock.Do(ctx, locker, "nightly-report", func(ctx context.Context) error {
		fmt.Println("running under the lock")
		return nil
	})
	fmt.Println("err:", err)
	// Output:
	// running under the lock
	// err: <nil>
}

func ExampleLease_Done() {
	ctx := context.Background()
	store := memory.NewStore()
	locker := memory.New(store, &lock.Options{TTL: 300 * time.Millisecond})
	defer locker.Close()
	lease, _ := locker.Lock(ctx, "job")
	store.DeleteKey("job") // the grant vanishes behind the holder's back
	<-lease.Done()         // renewal notices within TTL/3
	fmt.Println(errors.Is(lease.Err(), lock.ErrLost))
	// Output: true
}

func ExampleRWLocker() {
	ctx := context.Background()
	locker := memory.New(memory.NewStore(), nil)
	defer locker.Close()
	rw := locker.(lock.RWLocker)
	r1, _ := rw.RLock(ctx, "config")
	r2, err := rw.TryRLock(ctx, "config")
	fmt.Println("two readers:", err == nil)
	_, err = rw.TryLock(ctx, "config")
	fmt.Println("writer refused:", errors.Is(err, lock.ErrNotAcquired))
	r1.Unlock(ctx)
	r2.Unlock(ctx)
	// Output:
	// two readers: true
	// writer refused: true
}

// At most three deploys at once: each takes one of three permits of
// "deploys"; a fourth waits until a permit is returned.
func ExampleSemLocker() {
	ctx := context.Background()
	locker := memory.New(memory.NewStore(), nil)
	defer locker.Close()
	sem, err := lock.Semaphores(locker) // ErrInvalid, with the reason, on a backend without permits
	if err != nil {
		panic(err)
	}
	var permits []*lock.Lease
	for range 3 {
		p, err := sem.TryAcquire(ctx, "deploys", 3)
		if err != nil {
			panic(err)
		}
		permits = append(permits, p)
	}
	_, err = sem.TryAcquire(ctx, "deploys", 3)
	fmt.Println("fourth:", errors.Is(err, lock.ErrNotAcquired))
	_, err = sem.TryAcquire(ctx, "deploys", 5)
	fmt.Println("another limit:", errors.Is(err, lock.ErrInvalid))

	permits[0].Unlock(ctx)
	p, err := sem.Acquire(ctx, "deploys", 3)
	if err != nil {
		panic(err)
	}
	fmt.Println("token above the others:", p.Token() > permits[2].Token(), "limit:", p.Limit())
	// Output:
	// fourth: true
	// another limit: true
	// token above the others: true limit: 3
}

// Metrics and logs: an OpenTelemetry MeterProvider (here the SDK's with a
// ManualReader, to print what it measured; in a program, one with an
// exporter) and a Logger at Debug, which logs each lease's life.
func ExampleOptions_meterProvider() {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(ctx)
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		Level: slog.LevelDebug,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == "token" {
				return slog.Attr{} // they change from run to run
			}
			return a
		},
	}))

	locker := memory.New(memory.NewStore(), &lock.Options{MeterProvider: provider, Logger: logger})
	defer locker.Close()
	lease, err := locker.Lock(ctx, "orders/42")
	if err != nil {
		panic(err)
	}
	_, err = locker.TryLock(ctx, "orders/42")
	fmt.Println("TryLock:", errors.Is(err, lock.ErrHeld))
	lease.Unlock(ctx)

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		panic(err)
	}
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Histogram[float64]: // durations vary: print the counts
				for _, p := range d.DataPoints {
					lines = append(lines, fmt.Sprintf("%s{%s} count=%d", m.Name, p.Attributes.Encoded(attribute.DefaultEncoder()), p.Count))
				}
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					lines = append(lines, fmt.Sprintf("%s{%s} %d", m.Name, p.Attributes.Encoded(attribute.DefaultEncoder()), p.Value))
				}
			}
		}
	}
	slices.Sort(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// level=DEBUG msg="dlock: lease granted" key=orders/42 driver=memory mode=exclusive
	// TryLock: true
	// level=DEBUG msg="dlock: lease released" key=orders/42 driver=memory mode=exclusive
	// dlock.leases.held{dlock.driver=memory,dlock.mode=exclusive} 0
	// dlock.lock.hold.duration{dlock.driver=memory,dlock.end=unlocked,dlock.mode=exclusive} count=1
	// dlock.lock.wait.duration{dlock.blocking=false,dlock.driver=memory,dlock.mode=exclusive,dlock.outcome=not_acquired} count=1
	// dlock.lock.wait.duration{dlock.blocking=true,dlock.driver=memory,dlock.mode=exclusive,dlock.outcome=granted} count=1
}
