package observe_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/dlock-go/dlock/driver/memory"
	"github.com/dlock-go/dlock/lock"
)

// Metrics and logs: an OpenTelemetry MeterProvider (here the SDK's with a
// ManualReader, to print what it measured; in a program, one with an
// exporter) and a Logger at Debug, which logs each lease's life.
func Example_metricsAndLogs() {
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
