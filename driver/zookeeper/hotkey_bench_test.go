package zookeeper

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/go-zookeeper/zk"
)

// BenchmarkHotKey is the bench module's hot-key scenario (bench/
// contention.go) in this package: n contenders, each on its own
// connection (a process of its own), loop Lock, Unlock on one key for a
// fixed time. Every iteration runs dlock and go-zookeeper's zk.Lock once
// each, in alternating order, so that both see the same machine; it
// reports each one's median grants/s, the median of the per-iteration
// ratios (paired: load that comes and goes hits both sides of a pair
// alike), the client CPU per grant, and logs the requests sent per grant
// by opcode. Run with e.g.
//
//	go test -run '^$' -bench HotKey -benchtime 10x ./driver/zookeeper/
//
// HOTKEY_N (default 32) and HOTKEY_DUR (default 1s) set the contenders
// and the duration of each run.
func BenchmarkHotKey(b *testing.B) {
	n := envInt(b, "HOTKEY_N", 32)
	dur := envDur(b, "HOTKEY_DUR", time.Second)
	addrs := testserver.SharedZooKeeper(b).Addrs()
	libs := []string{"dlock", "zk.Lock"}
	rates := map[string][]float64{}
	ops := map[string]*opCounter{}
	cpu := map[string]time.Duration{}
	grants := map[string]int{}
	round := 0
	for b.Loop() {
		for j := range libs {
			lib := libs[(round+j)%len(libs)]
			if ops[lib] == nil {
				ops[lib] = &opCounter{}
			}
			c0 := cpuTime()
			g := hotKeyRun(b, addrs, lib, n, dur, ops[lib])
			cpu[lib] += cpuTime() - c0
			grants[lib] += g
			rates[lib] = append(rates[lib], float64(g)/dur.Seconds())
		}
		round++
	}
	var ratios []float64
	for i := range rates["dlock"] {
		ratios = append(ratios, rates["dlock"][i]/rates["zk.Lock"][i])
	}
	slices.Sort(ratios)
	for _, lib := range libs {
		b.ReportMetric(median(rates[lib]), lib+"-grants/s")
		b.ReportMetric(float64(cpu[lib].Microseconds())/float64(grants[lib]), lib+"-cpuµs/grant")
		b.Logf("%s: grants/s %.0f; per grant: %s", lib, rates[lib], ops[lib].perGrant(grants[lib]))
	}
	b.ReportMetric(ratios[len(ratios)/2], "dlock/zk.Lock")
	b.Logf("dlock/zk.Lock per round, sorted: %.3f", ratios)
}

func median(xs []float64) float64 {
	xs = slices.Clone(xs)
	slices.Sort(xs)
	return xs[len(xs)/2]
}

// hotKeyRun runs n contenders of lib on a fresh key for dur and returns
// their grants. Overlapping grants fail the benchmark.
func hotKeyRun(b *testing.B, addrs []string, lib string, n int, dur time.Duration, ops *opCounter) int {
	key := fmt.Sprintf("bench/hotkey/%s/%d", lib, time.Now().UnixNano())
	kp := keyPath(testRoot, key)
	conns := make([]*zk.Conn, n)
	var timeout time.Duration
	for i := range conns {
		conns[i], timeout = countingConn(b, addrs, ops)
	}
	if lib == "zk.Lock" {
		ensurePath(b, conns[0], kp)
	}
	ops.frozen.Store(false)
	var (
		wg    sync.WaitGroup
		total atomic.Int64
		inCS  atomic.Int32
		errs  atomic.Int64
	)
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	held := func() {
		if inCS.Add(1) != 1 {
			errs.Add(1)
		}
		if ctx.Err() == nil {
			total.Add(1)
		}
		inCS.Add(-1)
	}
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if lib == "zk.Lock" {
				for ctx.Err() == nil {
					zl := zk.NewLock(conns[i], kp, zk.WorldACL(zk.PermAll))
					if err := zl.Lock(); err != nil {
						if ctx.Err() == nil {
							errs.Add(1)
						}
						return
					}
					held()
					zl.Unlock()
				}
				return
			}
			l := New(conns[i], &Options{Root: testRoot, SessionTimeout: timeout})
			defer l.Close()
			for ctx.Err() == nil {
				lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				lease, err := l.Lock(lctx, key)
				cancel()
				if err != nil {
					if ctx.Err() == nil {
						errs.Add(1)
					}
					continue
				}
				held()
				lease.Unlock(context.Background())
			}
		}()
	}
	<-ctx.Done()
	ops.frozen.Store(true)
	if lib == "zk.Lock" {
		time.Sleep(50 * time.Millisecond)
		for _, c := range conns {
			c.Close() // zk.Lock waits without a context
		}
	}
	wg.Wait()
	for _, c := range conns {
		c.Close()
	}
	if e := errs.Load(); e > 0 {
		b.Fatalf("%s: %d failed Locks or overlapping grants", lib, e)
	}
	return int(total.Load())
}

// countingConn connects to addrs through a dialer that counts the
// requests sent in ops, and returns the connection and its negotiated
// session timeout.
func countingConn(b *testing.B, addrs []string, ops *opCounter) (*zk.Conn, time.Duration) {
	nt := newNegotiatedTimeout()
	c, _, err := zk.Connect(addrs, 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(zkLogger{}),
		zk.WithDialer(nt.wrapDialer(func(network, addr string, timeout time.Duration) (net.Conn, error) {
			c, err := net.DialTimeout(network, addr, timeout)
			if err != nil {
				return nil, err
			}
			return &countConn{Conn: c, ops: ops}, nil
		})))
	if err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for c.State() != zk.StateHasSession {
		if time.Now().After(deadline) {
			b.Fatal("no ZooKeeper session within 20s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return c, nt.get()
}

// opCounter counts the requests sent, by opcode, while not frozen.
type opCounter struct {
	frozen atomic.Bool
	n      [32]atomic.Int64
}

var opNames = map[int]string{1: "create", 2: "delete", 3: "exists", 4: "getData", 5: "setData",
	8: "getChildren", 9: "sync", 11: "ping", 12: "getChildren2", 14: "multi", 15: "create2", 19: "createContainer"}

func (o *opCounter) perGrant(grants int) string {
	var parts []string
	for op := range o.n {
		if v := o.n[op].Load(); v > 0 {
			name := opNames[op]
			if name == "" {
				name = fmt.Sprint(op)
			}
			parts = append(parts, fmt.Sprintf("%s %.2f", name, float64(v)/float64(grants)))
		}
	}
	return strings.Join(parts, ", ")
}

type countConn struct {
	net.Conn
	ops    *opCounter
	writes int
}

// Write counts a request: go-zookeeper writes one frame per Write
// (length, xid, opcode, ...), the first one the connect request.
func (c *countConn) Write(p []byte) (int, error) {
	c.writes++
	if c.writes > 1 && len(p) >= 12 && !c.ops.frozen.Load() {
		if op := int(binary.BigEndian.Uint32(p[8:12])); op >= 0 && op < len(c.ops.n) {
			c.ops.n[op].Add(1)
		}
	}
	return c.Conn.Write(p)
}

// cpuTime is the CPU time this process (the clients) has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	var n int
	if _, err := fmt.Sscan(v, &n); err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}

func envDur(b *testing.B, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		b.Fatalf("%s=%q: want a positive duration", name, v)
	}
	return d
}
