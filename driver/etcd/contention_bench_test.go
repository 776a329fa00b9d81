package etcd

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

// BenchmarkContention is bench's hot-key and many-keys scenarios on the
// driver's own test server: 32 contenders, each with a client of its
// own, Lock, Unlock, again, for a round of 2 s; dlock and
// concurrency.Mutex (a Session per client, NewMutex per Lock) by turns,
// 3 rounds each. It reports, per library, the median round's grants/s,
// and over all rounds per grant: the client's CPU (this process's user
// and system time), etcd's CPU (process_cpu_seconds_total) and the
// requests etcd handled by method (grpc_server_handled_total; streams
// count once, when they end). b.N is ignored: run with -benchtime 1x.
//
//	go test -run '^$' -bench Contention -benchtime 1x -v
func BenchmarkContention(b *testing.B) {
	e := testserver.SharedEtcd(b)
	ep := e.Endpoints()[0]
	const n, rounds, dur = 32, 3, 2 * time.Second
	for _, hot := range []bool{true, false} {
		scen := "many"
		if hot {
			scen = "hot"
		}
		b.Run(scen, func(b *testing.B) {
			type result struct {
				rates          []float64
				grants         int
				clientCPU, cpu float64
				reqs           map[string]float64
				sent           map[string]int
			}
			libs := []string{"dlock", "mutex"}
			res := map[string]*result{}
			for _, lib := range libs {
				res[lib] = &result{reqs: map[string]float64{}, sent: map[string]int{}}
			}
			for round := range rounds {
				for _, lib := range libs {
					prefix := fmt.Sprintf("dlock-bench/contention/%s/%s/%d/", time.Now().Format("150405.000000"), scen, round)
					rc := &rpcCount{n: map[string]int{}}
					lockers, closeAll := contenders(b, e.Endpoints(), lib, n, prefix, rc)
					reqs0, cpu0, cl0 := etcdRequests(b, ep), etcdCPU(b, ep)(), clientCPU()
					grants := contendFor(b, lockers, hot, dur)
					reqs1, cpu1, cl1 := etcdRequests(b, ep), etcdCPU(b, ep)(), clientCPU()
					closeAll()
					r := res[lib]
					r.rates = append(r.rates, float64(grants)/dur.Seconds())
					r.grants += grants
					r.clientCPU += cl1 - cl0
					r.cpu += cpu1 - cpu0
					for m, v := range rc.reset() {
						r.sent[m] += v
					}
					for m, v := range reqs1 {
						r.reqs[m] += v - reqs0[m]
					}
				}
			}
			for _, lib := range libs {
				r := res[lib]
				slices.Sort(r.rates)
				b.ReportMetric(r.rates[len(r.rates)/2], "grants/s-"+lib)
				b.ReportMetric(r.clientCPU/float64(r.grants), "client-µs/grant-"+lib)
				b.ReportMetric(r.cpu/float64(r.grants), "etcd-µs/grant-"+lib)
				var ms []string
				for m, v := range r.reqs {
					if v > 0 {
						ms = append(ms, m)
					}
				}
				sort.Strings(ms)
				for _, m := range ms {
					b.Logf("%s %s: etcd handled %-28s %.2f per grant", scen, lib, m, r.reqs[m]/float64(r.grants))
				}
				ms = ms[:0]
				for m := range r.sent {
					ms = append(ms, m)
				}
				sort.Strings(ms)
				for _, m := range ms {
					b.Logf("%s %s: client sent %-40s %.2f per grant", scen, lib, strings.TrimPrefix(m, "/etcdserverpb."), float64(r.sent[m])/float64(r.grants))
				}
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}

// contender is one client's Lock and Unlock of key.
type contender func(ctx context.Context, key string) (unlock func(context.Context) error, err error)

func contenders(b *testing.B, eps []string, lib string, n int, prefix string, rc *rpcCount) ([]contender, func()) {
	var cs []contender
	var closers []func()
	for range n {
		c, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop(), DialOptions: rc.options()})
		if err != nil {
			b.Fatal(err)
		}
		closers = append(closers, func() { c.Close() })
		switch lib {
		case "dlock":
			l := New(c, &Options{Prefix: prefix})
			closers = append(closers, func() { l.Close() })
			cs = append(cs, func(ctx context.Context, key string) (func(context.Context) error, error) {
				h, err := l.Lock(ctx, key)
				if err != nil {
					return nil, err
				}
				return h.Unlock, nil
			})
		default:
			s, err := concurrency.NewSession(c)
			if err != nil {
				b.Fatal(err)
			}
			closers = append(closers, func() { s.Close() })
			cs = append(cs, func(ctx context.Context, key string) (func(context.Context) error, error) {
				m := concurrency.NewMutex(s, prefix+"mutex/"+key)
				if err := m.Lock(ctx); err != nil {
					return nil, err
				}
				return m.Unlock, nil
			})
		}
	}
	return cs, func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
}

// contendFor runs the contenders for dur, on one key (hot) or one each,
// and returns the grants; it fails b on an overlap or an error.
func contendFor(b *testing.B, cs []contender, hot bool, dur time.Duration) int {
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	var grants, inside atomic.Int64
	var wg sync.WaitGroup
	for i, c := range cs {
		key := "hot"
		if !hot {
			key = fmt.Sprintf("k%d", i)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				unlock, err := c(ctx, key)
				if err != nil {
					if ctx.Err() == nil && !strings.Contains(err.Error(), "deadline exceeded") {
						b.Error(err)
					}
					return
				}
				if hot && inside.Add(1) != 1 {
					b.Error("overlapping grants")
				}
				grants.Add(1)
				if hot {
					inside.Add(-1)
				}
				if err := unlock(context.Background()); err != nil {
					b.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	return int(grants.Load())
}

// clientCPU is this process's CPU time so far, in µs.
func clientCPU() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e3
}

// etcdRequests reads the gRPC requests the member at endpoint has
// handled, by method.
func etcdRequests(tb testing.TB, endpoint string) map[string]float64 {
	out := map[string]float64{}
	r, err := http.Get(endpoint + "/metrics")
	if err != nil {
		tb.Logf("etcd metrics: %v", err)
		return out
	}
	defer r.Body.Close()
	sc := bufio.NewScanner(r.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "grpc_server_handled_total{") {
			continue
		}
		i := strings.Index(line, `grpc_method="`)
		if i < 0 {
			continue
		}
		m := line[i+len(`grpc_method="`):]
		m = m[:strings.IndexByte(m, '"')]
		f := strings.Fields(line)
		v, _ := strconv.ParseFloat(f[len(f)-1], 64)
		out[m] += v
	}
	return out
}
