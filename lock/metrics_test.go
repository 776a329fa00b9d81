package lock_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric/noop"

	"github.com/dlock-go/dlock/driver/memory"
	"github.com/dlock-go/dlock/internal/testsupport/canary"
	"github.com/dlock-go/dlock/lock"
)

// The tests that read lock's metrics through OpenTelemetry's SDK are in
// the harness module (harness/observe): the SDK is no dependency of this
// module, not even of its tests, so that users' go.sum never lists it.

// raceEnabled is set by race_test.go: the race detector makes sync.Pool
// drop items at random, so allocation counts vary.
var raceEnabled bool

func TestObservingAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes allocation counts vary")
	}
	cycles := func(o *lock.Options) float64 {
		l := memory.New(memory.NewStore(), o)
		defer l.Close()
		ctx := context.Background()
		return testing.AllocsPerRun(500, func() {
			lease, err := l.Lock(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			if err := lease.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
	base := cycles(nil)
	info := slog.New(slog.NewTextHandler(&syncLog{}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	for name, o := range map[string]*lock.Options{
		"Logger at Info":      {Logger: info},
		"no-op MeterProvider": {MeterProvider: noop.NewMeterProvider()},
	} {
		if n := cycles(o); n > base {
			t.Errorf("%s: %v allocations per Lock+Unlock; want %v, as without", name, n, base)
		}
	}
	t.Logf("%v allocations per Lock+Unlock", base)
}

// logRecord is one record of a slog.JSONHandler.
type logRecord map[string]any

func (r logRecord) String() string { return fmt.Sprint(map[string]any(r)) }

// The lease life cycle is logged at Debug: granted, released, detached,
// resumed, closed, and lost (at Warn), each with the key, driver, mode and
// token; permits with their limit.
//
// A stall of the renewal's margin loses a lease the test keeps, and logs a
// loss it does not expect: a meter tells it, and the check runs again.
func TestLifecycleLogs(t *testing.T) {
	for try := 1; ; try++ {
		m := canary.StartMeter()
		bad := lifecycleLogs(t)
		worst := m.End()
		if len(bad) == 0 || try == 3 || !canary.Stalled(t, worst, 200*time.Millisecond, strings.Join(bad, "; ")) {
			for _, e := range bad {
				t.Error(e)
			}
			return
		}
	}
}

// lifecycleLogs runs TestLifecycleLogs once and returns what it found
// wrong.
func lifecycleLogs(t *testing.T) (bad []string) {
	var buf syncLog
	logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	store := memory.NewStore()
	o := &lock.Options{TTL: 300 * time.Millisecond, Logger: logger}
	l := memory.New(store, o)
	ctx := bg(t)

	a, err := l.Lock(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	a.Unlock(ctx)
	d, err := l.RLock(ctx, "d")
	if err != nil {
		t.Fatal(err)
	}
	h, err := d.Detach()
	if err != nil {
		t.Fatal(err)
	}
	other := memory.New(store, o)
	r, err := other.Resume(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	r.Unlock(ctx)
	p, err := l.Acquire(ctx, "p", 3)
	if err != nil {
		t.Fatal(err)
	}
	lost, err := l.Lock(ctx, "lost")
	if err != nil {
		t.Fatal(err)
	}
	store.DeleteKey("lost")
	<-lost.Done()
	for deadline := time.Now().Add(2 * time.Second); !strings.Contains(buf.String(), "lease lost") && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	l.Close() // closes p
	other.Close()

	var recs []logRecord
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var r logRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		recs = append(recs, r)
	}
	type want struct {
		level, msg, key, mode string
		token                 uint64
		extra                 map[string]any
	}
	wants := []want{
		{"DEBUG", "dlock: lease granted", "a", "exclusive", a.Token(), nil},
		{"DEBUG", "dlock: lease released", "a", "exclusive", a.Token(), nil},
		{"DEBUG", "dlock: lease granted", "d", "shared", d.Token(), nil},
		{"DEBUG", "dlock: lease detached", "d", "shared", d.Token(), nil},
		{"DEBUG", "dlock: lease resumed", "d", "shared", d.Token(), nil},
		{"DEBUG", "dlock: lease released", "d", "shared", d.Token(), nil},
		{"DEBUG", "dlock: lease granted", "p", "permit", p.Token(), map[string]any{"limit": 3.0}},
		{"DEBUG", "dlock: lease granted", "lost", "exclusive", lost.Token(), nil},
		{"WARN", "dlock: lease lost", "lost", "exclusive", lost.Token(), map[string]any{"cause": "not_held"}},
		{"DEBUG", "dlock: lease closed", "p", "permit", p.Token(), map[string]any{"limit": 3.0}},
	}
	if len(recs) != len(wants) {
		return append(bad, fmt.Sprintf("%d records: %v; want %d", len(recs), recs, len(wants)))
	}
	for i, w := range wants {
		r := recs[i]
		if r["level"] != w.level || r["msg"] != w.msg || r["key"] != w.key || r["driver"] != "memory" || r["mode"] != w.mode || r["token"] != float64(w.token) {
			bad = append(bad, fmt.Sprintf("record %d: %v; want %s %q key=%s driver=memory mode=%s token=%d", i, r, w.level, w.msg, w.key, w.mode, w.token))
		}
		for k, v := range w.extra {
			if r[k] != v {
				bad = append(bad, fmt.Sprintf("record %d: %v; want %s=%v", i, r, k, v))
			}
		}
		if w.level == "WARN" && r["err"] == nil {
			bad = append(bad, fmt.Sprintf("record %d: %v; want the err", i, r))
		}
		if strings.Contains(fmt.Sprint(r), "dlock1.") {
			bad = append(bad, fmt.Sprintf("record %d logs a handle (a capability): %v", i, r))
		}
	}

	// Above Debug, only the loss is logged.
	var warn syncLog
	store2 := memory.NewStore()
	quiet := memory.New(store2, &lock.Options{TTL: 300 * time.Millisecond, Logger: slog.New(slog.NewJSONHandler(&warn, nil))})
	defer quiet.Close()
	lease, err := quiet.Lock(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	store2.DeleteKey("q")
	<-lease.Done()
	for deadline := time.Now().Add(2 * time.Second); !strings.Contains(warn.String(), "lease lost") && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if n := strings.Count(warn.String(), "\n"); n != 1 || !strings.Contains(warn.String(), `"msg":"dlock: lease lost"`) {
		bad = append(bad, fmt.Sprintf("at Info: %q; want the lost lease alone", warn.String()))
	}
	return bad
}
