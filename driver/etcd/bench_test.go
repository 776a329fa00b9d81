package etcd

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// rpcCount counts a client's gRPC calls by method: unary calls and
// streams opened (a keep-alive stream per renewal batch, the watch
// stream), and messages sent on streams.
type rpcCount struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *rpcCount) add(m string) {
	r.mu.Lock()
	r.n[m]++
	r.mu.Unlock()
}

func (r *rpcCount) reset() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.n
	r.n = map[string]int{}
	return out
}

type countedStream struct {
	grpc.ClientStream
	r *rpcCount
	m string
}

func (s countedStream) SendMsg(m any) error {
	s.r.add(s.m + " send")
	return s.ClientStream.SendMsg(m)
}

func (r *rpcCount) options() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			r.add(method)
			return inv(ctx, method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, s grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			r.add(method + " open")
			cs, err := s(ctx, desc, cc, method, opts...)
			if err != nil {
				return nil, err
			}
			return countedStream{cs, r, method}, nil
		}),
	}
}

// BenchmarkCycle is an uncontended Lock+Unlock of one key with the
// defaults (auto-renew on), as bench's uncontended scenario makes it; it
// reports the gRPC requests per cycle by method (run with -v).
func BenchmarkCycle(b *testing.B) {
	e := testserver.SharedEtcd(b)
	r := &rpcCount{n: map[string]int{}}
	c, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(), DialOptions: r.options()})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	l := New(c, &Options{Prefix: "dlock-bench/" + time.Now().Format("150405.000000") + "/"})
	defer l.Close()
	ctx := context.Background()
	cycle := func() {
		h, err := l.Lock(ctx, "k")
		if err != nil {
			b.Fatal(err)
		}
		if err := h.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
	cycle() // the counter lease and the watch stream are made once
	r.reset()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		cycle()
	}
	b.StopTimer()
	got := r.reset()
	var ms []string
	total := 0
	for m, n := range got {
		ms = append(ms, m)
		total += n
	}
	sort.Strings(ms)
	for _, m := range ms {
		b.Logf("%-40s %.2f per cycle", strings.TrimPrefix(m, "/etcdserverpb."), float64(got[m])/float64(b.N))
	}
	b.ReportMetric(float64(total)/float64(b.N), "rpcs/op")
}

// BenchmarkDriverCycle is BenchmarkCycle's cycle made on the driver
// alone (Acquire, Release), without lock: what lock adds is the
// difference.
func BenchmarkDriverCycle(b *testing.B) {
	e := testserver.SharedEtcd(b)
	c, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	d, _ := newDriver(&Options{Prefix: "dlock-bench/" + time.Now().Format("150405.000000") + "/"})
	d.c = c
	defer d.Close()
	ctx := context.Background()
	b.ReportAllocs()
	for i := range b.N + 1 {
		if i == 1 {
			b.ResetTimer()
		}
		l := &driver.Lease{Key: "k", Owner: fmt.Sprintf("%032x", i+1), TTL: 30 * time.Second}
		if err := d.Acquire(ctx, l); err != nil {
			b.Fatal(err)
		}
		if err := d.Release(ctx, l); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMutexCycle is etcd's concurrency.Mutex on one Session, a
// NewMutex per Lock, as bench's peer makes it.
func BenchmarkMutexCycle(b *testing.B) {
	e := testserver.SharedEtcd(b)
	c, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	s, err := concurrency.NewSession(c)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		m := concurrency.NewMutex(s, "/bench-mutex/k")
		if err := m.Lock(ctx); err != nil {
			b.Fatal(err)
		}
		if err := m.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
