package rediswatch

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/dlock-go/dlock/driver/redisnx"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// A Locker that cannot keep up with its leases says so before it loses
// one: with a real Redis behind a proxy whose replies come later and later
// (a slower network or server), the first late renewal is counted
// (dlock.renewals.late) and a warning logged before the first lease is
// lost, on both Redis drivers.
func TestAudit38LateRenewalsWarnBeforeLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("ramps a proxy's delay for seconds")
	}
	for _, drv := range []struct {
		name string
		new  func(redis.UniversalClient, lock.Options) *lock.Locker
	}{
		{"redisnx", func(c redis.UniversalClient, o lock.Options) *lock.Locker {
			return redisnx.New(c, &redisnx.Options{Options: o})
		}},
		{"rediswatch", func(c redis.UniversalClient, o lock.Options) *lock.Locker {
			return New(c, &Options{Options: o})
		}},
	} {
		t.Run(drv.name, func(t *testing.T) {
			t.Parallel()
			proxy := startSlowProxy(t, testserver.SharedRedis(t).Addr())
			rdb := redis.NewClient(&redis.Options{Addr: proxy.addr(), ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})
			t.Cleanup(func() { rdb.Close() })
			ev := &events{}
			logger := slog.New(slog.NewTextHandler(ev, &slog.HandlerOptions{Level: slog.LevelWarn}))
			l := drv.new(rdb, lock.Options{TTL: 3 * time.Second, Logger: logger, MeterProvider: eventMeter{ev: ev}})
			t.Cleanup(func() { l.Close() })
			ctx := context.Background()
			base := fmt.Sprintf("late-test/%s/%d/", drv.name, time.Now().UnixNano())
			for i := range 20 {
				if _, err := l.TryLock(ctx, base+fmt.Sprint(i)); err != nil {
					t.Fatal(err)
				}
			}
			// Replies come 100 ms later each 300 ms: a refresh (one or two
			// round trips) is late at some 0.25-0.5 s of delay and lost
			// past 1-2 s; stop once a lease is lost.
			for d := time.Duration(0); d < 4*time.Second && ev.first("dlock.leases.lost").IsZero(); d += 100 * time.Millisecond {
				proxy.delay.Store(int64(d))
				time.Sleep(300 * time.Millisecond)
			}
			late, warned, lost := ev.first("dlock.renewals.late"), ev.first("warn"), ev.first("dlock.leases.lost")
			switch {
			case lost.IsZero():
				t.Fatalf("no lease lost with replies 4 s late")
			case late.IsZero() || !late.Before(lost):
				t.Errorf("first late renewal counted at %v, first lease lost at %v: want the count first", clock(late), clock(lost))
			case warned.IsZero() || !warned.Before(lost):
				t.Errorf("warning logged at %v, first lease lost at %v: want the warning first\nlog:\n%s", clock(warned), clock(lost), ev.log())
			}
			if !strings.Contains(ev.log(), "dlock: renewals falling behind") {
				t.Errorf("no warning of renewals falling behind; log:\n%s", ev.log())
			}
			t.Logf("late at %v, warned at %v, lost at %v", clock(late), clock(warned), clock(lost))
		})
	}
}

func clock(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.Format("15:04:05.000")
}

// events records when each counter was first added to, and the log.
type events struct {
	mu    sync.Mutex
	at    map[string]time.Time
	lines strings.Builder
}

func (e *events) add(name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.at == nil {
		e.at = map[string]time.Time{}
	}
	if _, ok := e.at[name]; !ok {
		e.at[name] = time.Now()
	}
}

func (e *events) first(name string) time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.at[name]
}

// Write records a log line (the Logger logs at Warn only) as "warn".
func (e *events) Write(p []byte) (int, error) {
	e.add("warn")
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.lines.Len() < 1<<16 {
		e.lines.Write(p)
	}
	return len(p), nil
}

func (e *events) log() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lines.String()
}

// eventMeter is a MeterProvider whose Int64Counters record their first
// Add in ev; its other instruments record nothing.
type eventMeter struct {
	noop.MeterProvider
	ev *events
}

func (p eventMeter) Meter(string, ...metric.MeterOption) metric.Meter {
	return eventCounters{ev: p.ev}
}

type eventCounters struct {
	noop.Meter
	ev *events
}

func (m eventCounters) Int64Counter(name string, _ ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	return eventCounter{name: name, ev: m.ev}, nil
}

type eventCounter struct {
	noop.Int64Counter
	name string
	ev   *events
}

func (c eventCounter) Add(context.Context, int64, ...metric.AddOption) { c.ev.add(c.name) }
func (c eventCounter) Enabled(context.Context) bool                    { return true }

// slowProxy forwards TCP connections to a server, delaying each chunk of
// the server's replies by delay (nanoseconds; changed while it runs)
// without reordering them.
type slowProxy struct {
	ln    net.Listener
	to    string
	delay atomic.Int64
	mu    sync.Mutex
	conns []net.Conn
}

func startSlowProxy(t *testing.T, to string) *slowProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &slowProxy{ln: ln, to: to}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			c.Close()
		}
	})
	return p
}

func (p *slowProxy) addr() string { return p.ln.Addr().String() }

func (p *slowProxy) serve(c net.Conn) {
	s, err := net.Dial("tcp", p.to)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns = append(p.conns, c, s)
	p.mu.Unlock()
	defer c.Close()
	defer s.Close()
	go io.Copy(s, c)
	type chunk struct {
		b  []byte
		at time.Time
	}
	chunks := make(chan chunk, 4096)
	go func() {
		defer close(chunks)
		for {
			b := make([]byte, 64<<10)
			n, err := s.Read(b)
			if n > 0 {
				chunks <- chunk{b[:n], time.Now()}
			}
			if err != nil {
				return
			}
		}
	}()
	for ch := range chunks {
		time.Sleep(time.Until(ch.at.Add(time.Duration(p.delay.Load()))))
		if _, err := c.Write(ch.b); err != nil {
			return
		}
	}
}
