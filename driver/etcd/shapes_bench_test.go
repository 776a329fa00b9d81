package etcd

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// BenchmarkCycleShapes times the requests of an uncontended cycle as
// raw KV/Txn, in shapes that differ in the fencing counter only, and
// concurrency.Mutex's, in blocks of 50 cycles taken by turns (so load
// from elsewhere weighs on all alike). It reports each shape's median
// block, in µs per cycle, and etcd's CPU per cycle (from its
// process_cpu_seconds_total); b.N is the cycles per shape.
//
//	leased:    the fast grant (the queue empty, the counter below the
//	           token; the entry and the counter put, each on a lease) and
//	           the release (a delete of the entry, with its previous value)
//	unleased:  the same, the counter on no lease
//	nocounter: the same, with no counter (neither compared nor written)
//	mutex:     concurrency.Mutex's Lock (a Txn: put on the session's
//	           lease if absent, read the first waiter) and Unlock (a
//	           DeleteRange)
func BenchmarkCycleShapes(b *testing.B) {
	e := testserver.SharedEtcd(b)
	c, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	entryLease, err := c.Grant(ctx, 600)
	if err != nil {
		b.Fatal(err)
	}
	counterLease, err := c.Grant(ctx, 600)
	if err != nil {
		b.Fatal(err)
	}
	kv := pb.NewKVClient(c.ActiveConnection())
	prefix := "dlock-bench/shapes/" + time.Now().Format("150405.000000") + "/"
	q, counter := prefix+"q/k/", prefix+"c/k"
	entry := q + "0123456789abcdef0123456789abcdef"
	value := entryValue{token: uint64(time.Now().UnixMicro()), since: time.Now().UnixMicro()}.String()
	grant := func(counterOn int64, withCounter bool) *pb.TxnRequest {
		r := &pb.TxnRequest{
			Compare: []*pb.Compare{cmpCreate(q, clientv3.GetPrefixRangeEnd(q), pb.Compare_EQUAL, 0)},
			Success: []*pb.RequestOp{opPut(entry, value, int64(entryLease.ID))},
		}
		if withCounter {
			cv := counterValue(uint64(time.Now().UnixMicro()))
			r.Compare = append(r.Compare, cmpValueLess(counter, cv))
			r.Success = append(r.Success, opPut(counter, cv, counterOn))
		}
		return r
	}
	release := &pb.TxnRequest{
		Compare: []*pb.Compare{cmpCreate(entry, "", pb.Compare_GREATER, 0)},
		Success: []*pb.RequestOp{opDelete(entry, true)},
	}
	dlockCycle := func(counterOn int64, withCounter bool) func() error {
		return func() error {
			if _, err := kv.Txn(ctx, grant(counterOn, withCounter)); err != nil {
				return err
			}
			_, err := kv.Txn(ctx, release)
			return err
		}
	}
	mutexKey := prefix + "m/k/" + strconv.FormatInt(int64(entryLease.ID), 16)
	mutexLock := &pb.TxnRequest{
		Compare: []*pb.Compare{cmpCreate(mutexKey, "", pb.Compare_EQUAL, 0)},
		Success: []*pb.RequestOp{opPut(mutexKey, "", int64(entryLease.ID)), {Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{
			Key: []byte(prefix + "m/k/"), RangeEnd: []byte(clientv3.GetPrefixRangeEnd(prefix + "m/k/")),
			SortOrder: pb.RangeRequest_ASCEND, SortTarget: pb.RangeRequest_CREATE, Limit: 1,
		}}}},
		Failure: []*pb.RequestOp{opGet(mutexKey)},
	}
	shapes := []struct {
		name  string
		cycle func() error
	}{
		{"leased", dlockCycle(int64(counterLease.ID), true)},
		{"unleased", dlockCycle(0, true)},
		{"nocounter", dlockCycle(0, false)},
		{"mutex", func() error {
			if _, err := kv.Txn(ctx, mutexLock); err != nil {
				return err
			}
			_, err := kv.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte(mutexKey)})
			return err
		}},
	}
	if _, err := c.Put(ctx, counter, counterValue(1)); err != nil {
		b.Fatal(err)
	}
	cpuOf := etcdCPU(b, e.Endpoints()[0])
	const block = 50
	blocks := make([][]float64, len(shapes))
	cpu := make([]float64, len(shapes))
	b.ResetTimer()
	for done := 0; done < b.N; done += block {
		for i, s := range shapes {
			c0, t0 := cpuOf(), time.Now()
			for range block {
				if err := s.cycle(); err != nil {
					b.Fatal(s.name, err)
				}
			}
			blocks[i] = append(blocks[i], float64(time.Since(t0).Microseconds())/block)
			cpu[i] += cpuOf() - c0
		}
	}
	b.StopTimer()
	for i, s := range shapes {
		slices.Sort(blocks[i])
		b.ReportMetric(blocks[i][len(blocks[i])/2], "µs/"+s.name)
		b.ReportMetric(cpu[i]/float64(len(blocks[i])*block), "etcd-cpu-µs/"+s.name)
	}
	b.ReportMetric(0, "ns/op")
}

// etcdCPU returns a function that reads the CPU the etcd member at
// endpoint has used, in µs (its metrics' process_cpu_seconds_total;
// 0 when they cannot be read).
func etcdCPU(tb testing.TB, endpoint string) func() float64 {
	return func() float64 {
		r, err := http.Get(endpoint + "/metrics")
		if err != nil {
			tb.Logf("etcd metrics: %v", err)
			return 0
		}
		defer r.Body.Close()
		sc := bufio.NewScanner(r.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "process_cpu_seconds_total "); ok {
				f, _ := strconv.ParseFloat(v, 64)
				return f * 1e6
			}
		}
		return 0
	}
}

// BenchmarkDeletedNames times the fast grant's compare over a queue's
// prefix (CreateRevision(prefix) = 0, in a Txn that reads one key) with
// n names deleted under the prefix since etcd last compacted: every
// grant's entry has a name of its own (its owner's), and etcd's index
// keeps a deleted name until a compaction passes it, so a range over
// the prefix visits each. reused=n is one name put and deleted n times:
// the entry names a Locker reuses.
func BenchmarkDeletedNames(b *testing.B) {
	e := testserver.SharedEtcd(b)
	c, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	kv := pb.NewKVClient(c.ActiveConnection())
	cpuOf := etcdCPU(b, e.Endpoints()[0])
	run := "dlock-bench/deleted/" + time.Now().Format("150405.000000") + "/"
	for _, n := range []int{0, 1000, 10000, 30000, -30000} {
		q := run + strconv.Itoa(n) + "/q/k/"
		for i := range max(n, -n) {
			k := q + fmt.Sprintf("%032x", i) // an owner's name
			if n < 0 {
				k = q + fmt.Sprintf("%032x", 0) // one name, reused
			}
			if _, err := kv.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{opPut(k, "", 0)}}); err != nil {
				b.Fatal(err)
			}
			if _, err := kv.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{opDelete(k, false)}}); err != nil {
				b.Fatal(err)
			}
		}
		req := &pb.TxnRequest{
			Compare: []*pb.Compare{cmpCreate(q, clientv3.GetPrefixRangeEnd(q), pb.Compare_EQUAL, 0)},
			Success: []*pb.RequestOp{opGet(q + "x")},
		}
		name := "deleted=" + strconv.Itoa(n)
		if n < 0 {
			name = "reused=" + strconv.Itoa(-n)
		}
		b.Run(name, func(b *testing.B) {
			c0 := cpuOf()
			for range b.N {
				if r, err := kv.Txn(ctx, req); err != nil || !r.Succeeded {
					b.Fatal(r, err)
				}
			}
			b.ReportMetric((cpuOf()-c0)/float64(b.N), "etcd-cpu-µs/op")
		})
	}
}
