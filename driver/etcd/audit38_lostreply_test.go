package etcd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// lossyProxy forwards every gRPC call to one etcd member and loses the
// member's reply to the KV/Txn requests that lose picks: the request is
// applied (the proxy waits for the member's answer), and the client
// hears nothing until its try's bound ends it. A write whose reply was
// lost is a write whose outcome the driver cannot know.
type lossyProxy struct {
	ln      net.Listener
	srv     *grpc.Server
	backend *grpc.ClientConn
	lose    atomic.Pointer[func(*pb.TxnRequest) bool]
	lost    atomic.Int64                              // replies lost (the request applied)
	late    atomic.Int64                              // requests sent on after their client left, applied or not
	before  atomic.Pointer[func(*pb.TxnRequest) bool] // called with each Txn before it is sent on; true: it is sent late, as the client left

	renewals   atomic.Int32  // what becomes of LeaseKeepAlive messages: kaPass, kaLoseReplies, kaDrop
	kaStreams  *atomic.Int64 // LeaseKeepAlive streams opened, maybe shared by proxies
	lostRenews atomic.Int64  // keep-alive replies lost or requests dropped
	muteWatch  atomic.Bool   // Watch streams hear nothing from the member
}

const (
	kaPass        = iota
	kaLoseReplies // the member renews; the replies on every other stream (kaStreams) are lost
	kaDrop        // the requests never reach the member
)

const keepAliveMethod = "/etcdserverpb.Lease/LeaseKeepAlive"

// lossyCodec passes messages through as bytes.
type lossyCodec struct{}

func (lossyCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (lossyCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (lossyCodec) Name() string { return "proto" }

func newLossyProxy(t *testing.T, target string) *lossyProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(lossyCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	p := &lossyProxy{ln: ln, backend: cc, kaStreams: new(atomic.Int64)}
	p.srv = grpc.NewServer(grpc.ForceServerCodec(lossyCodec{}), grpc.UnknownServiceHandler(p.handle))
	go p.srv.Serve(ln)
	t.Cleanup(func() { p.srv.Stop(); cc.Close() })
	return p
}

func (p *lossyProxy) addr() string { return p.ln.Addr().String() }

// losing makes the proxy lose the replies of the Txn requests f picks
// (nil: none).
func (p *lossyProxy) losing(f func(*pb.TxnRequest) bool) { p.lose.Store(&f) }

func (p *lossyProxy) handle(_ any, ss grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(ss)
	md, _ := metadata.FromIncomingContext(ss.Context())
	if method == "/etcdserverpb.KV/Txn" {
		return p.txn(ss, md)
	}
	ctx, cancel := context.WithCancel(metadata.NewOutgoingContext(ss.Context(), md))
	defer cancel()
	cs, err := p.backend.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method)
	if err != nil {
		return err
	}
	ka := method == keepAliveMethod
	watch := method == "/etcdserverpb.Watch/Watch"
	odd := ka && p.kaStreams.Add(1)%2 == 1
	go func() {
		for {
			var b []byte
			if err := ss.RecvMsg(&b); err != nil {
				cs.CloseSend()
				return
			}
			if ka && p.renewals.Load() == kaDrop {
				p.lostRenews.Add(1)
				continue
			}
			if err := cs.SendMsg(&b); err != nil {
				return
			}
		}
	}()
	for {
		var b []byte
		if err := cs.RecvMsg(&b); err != nil {
			ss.SetTrailer(cs.Trailer())
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if r := p.renewals.Load(); ka && (r == kaDrop || r == kaLoseReplies && odd) {
			p.lostRenews.Add(1)
			continue
		}
		if watch && p.muteWatch.Load() {
			continue
		}
		if err := ss.SendMsg(&b); err != nil {
			return err
		}
	}
}

// txn forwards one Txn; when lose picks it, the member's answer is
// awaited (the request is applied, whatever the client does meanwhile)
// and then dropped.
func (p *lossyProxy) txn(ss grpc.ServerStream, md metadata.MD) error {
	var in []byte
	if err := ss.RecvMsg(&in); err != nil {
		return err
	}
	var req pb.TxnRequest
	drop := false
	if req.Unmarshal(in) == nil {
		if f := p.before.Load(); f != nil && *f != nil {
			drop = (*f)(&req)
		}
		if f := p.lose.Load(); f != nil && *f != nil {
			drop = drop || (*f)(&req)
		}
	}
	ctx := ss.Context()
	if drop {
		// applied even if the client gives up first
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
	}
	var out []byte
	err := p.backend.Invoke(metadata.NewOutgoingContext(ctx, md), "/etcdserverpb.KV/Txn", &in, &out)
	if drop {
		p.late.Add(1)
	}
	if err != nil {
		return err
	}
	if drop {
		p.lost.Add(1)
		<-ss.Context().Done()
		return ss.Context().Err()
	}
	return ss.SendMsg(&out)
}

// grantTxn picks a grant's write: an entry's Put and the counter's
// (grantWrite).
func grantTxn(prefix string) func(*pb.TxnRequest) bool {
	return func(r *pb.TxnRequest) bool {
		return len(r.Success) == 2 && r.Success[1].GetRequestPut() != nil &&
			strings.HasPrefix(string(r.Success[1].GetRequestPut().Key), prefix+"c/")
	}
}

// placeTxn picks a waiter's place: its entry's Put with the queue's and
// counter's reads (place).
func placeTxn(prefix string) func(*pb.TxnRequest) bool {
	return func(r *pb.TxnRequest) bool {
		return len(r.Success) == 3 && r.Success[0].GetRequestPut() != nil &&
			strings.HasPrefix(string(r.Success[0].GetRequestPut().Key), prefix+"q/")
	}
}

// TestAudit38LostGrantReply: the reply of a grant's write is lost (the
// write landed), so the driver sends it again to the other endpoint,
// where the counter has moved. The grant must be recognised as its own
// (landed): every TryLock of a free key, and every queued Lock after
// the release, is granted, with tokens that rise, and nothing is left
// on etcd after the Unlocks.
func TestAudit38LostGrantReply(t *testing.T) {
	e := testserver.SharedEtcd(t)
	prefix := fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())
	p := newLossyProxy(t, strings.TrimPrefix(e.Endpoints()[0], "http://"))
	// l only through p: with two endpoints, round-robin's parity could
	// keep every grant off p (the grant and release of an uncontended
	// cycle are its only two requests). A resend goes through p again,
	// which loses every other grant reply it carries.
	l := newTestLocker(t, []string{p.addr()}, &Options{Prefix: prefix, Options: lock.Options{TTL: 5 * time.Second}}, &netCut{})
	other := newTestLocker(t, e.Endpoints(), &Options{Prefix: prefix, Options: lock.Options{TTL: 5 * time.Second}}, &netCut{})
	raw := rawClient(t, e.Endpoints())
	// The proxy loses every other grant reply it carries: gRPC's
	// round-robin may send a try again through it (other calls share
	// the rotation), and a write whose every try's reply is lost is
	// one whose outcome nobody can know.
	grant := grantTxn(prefix)
	var carried atomic.Int64
	p.losing(func(r *pb.TxnRequest) bool { return grant(r) && carried.Add(1)%2 == 1 })
	k := "audit38-lost-grant"
	var last uint64
	rising := func(who string, ls *lock.Lease) {
		t.Helper()
		if ls.Token() <= last {
			t.Fatalf("%s: token %d after %d", who, ls.Token(), last)
		}
		last = ls.Token()
	}

	for i := 0; i < 8; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		ls, err := l.TryLock(ctx, k)
		if err != nil {
			cancel()
			t.Fatalf("TryLock %d of a free key (%d grant replies lost so far): %v", i, p.lost.Load(), err)
		}
		rising("TryLock", ls)
		if err := ls.Unlock(ctx); err != nil {
			t.Fatalf("Unlock %d: %v", i, err)
		}
		cancel()
	}
	tried := p.lost.Load()

	for i := 0; i < 6; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		h, err := other.Lock(ctx, k)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		rising("holder", h)
		got := make(chan error, 1)
		var w *lock.Lease
		go func() {
			var err error
			w, err = l.Lock(ctx, k)
			got <- err
		}()
		waitEntries(t, raw, prefix+"q/"+escape(k)+"/", 2)
		if err := h.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			cancel()
			t.Fatalf("a queued Lock %d after the release (%d grant replies lost so far): %v", i, p.lost.Load(), err)
		}
		rising("waiter", w)
		if err := w.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
	if tried == 0 || p.lost.Load() == tried {
		t.Fatalf("grant replies lost: %d by TryLocks, %d by queued Locks: the attack did not happen", tried, p.lost.Load()-tried)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := raw.Get(ctx, prefix+"q/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kvs) != 0 {
		t.Errorf("after every Unlock, %d entries are left: %s", len(r.Kvs), r.Kvs[0].Key)
	}
	t.Logf("%d grant replies lost (%d by TryLocks)", p.lost.Load(), tried)
}

// TestAudit38LostPlaceReply: the reply of a waiter's place (its entry's
// write) is lost while the write landed. The waiter's next step must
// adopt the entry it made and keep its place: a waiter that queued
// after it is granted after it, the entry is not written again, and
// nothing is left after the Unlocks.
func TestAudit38LostPlaceReply(t *testing.T) {
	e := testserver.SharedEtcd(t)
	prefix := fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())
	p := newLossyProxy(t, strings.TrimPrefix(e.Endpoints()[0], "http://"))
	opts := &Options{Prefix: prefix, Options: lock.Options{TTL: 5 * time.Second}}
	// one endpoint, p: the step after a lost reply goes to the member
	// that applied the write; p loses one place's reply a round
	l := newTestLocker(t, []string{p.addr()}, opts, &netCut{})
	other := newTestLocker(t, e.Endpoints(), opts, &netCut{})
	third := newTestLocker(t, e.Endpoints(), opts, &netCut{})
	raw := rawClient(t, e.Endpoints())
	var armed atomic.Bool
	place := placeTxn(prefix)
	p.losing(func(r *pb.TxnRequest) bool { return place(r) && armed.CompareAndSwap(true, false) })
	k := "audit38-lost-place"
	queue := prefix + "q/" + escape(k) + "/"

	for i := 0; i < 3; i++ {
		lost := p.lost.Load()
		armed.Store(true)
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		h, err := other.Lock(ctx, k)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		type grant struct {
			who string
			l   *lock.Lease
			err error
		}
		got := make(chan grant, 2)
		queued := func(who string, lk *lock.Locker) {
			go func() {
				ls, err := lk.Lock(ctx, k)
				got <- grant{who, ls, err}
			}()
		}
		queued("the first waiter", l)
		waitEntries(t, raw, queue, 2)
		r, err := raw.Get(ctx, queue, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
		if err != nil {
			t.Fatal(err)
		}
		first := r.Kvs[1]
		// The entry is visible before the proxy has the reply to lose:
		// on a loaded machine its count moves a moment later.
		for end := time.Now().Add(5 * time.Second); p.lost.Load() == lost && time.Now().Before(end); {
			time.Sleep(10 * time.Millisecond)
		}
		if p.lost.Load() == lost {
			t.Fatalf("round %d: the first waiter's place was answered: the attack did not happen", i)
		}
		queued("the second waiter", third)
		waitEntries(t, raw, queue, 3)
		// the first waiter's reply was lost: its step after the try's
		// bound (2 s) adopts its entry
		time.Sleep(3 * time.Second)
		g, err := raw.Get(ctx, string(first.Key))
		if err != nil {
			t.Fatal(err)
		}
		if len(g.Kvs) != 1 || g.Kvs[0].CreateRevision != first.CreateRevision {
			t.Errorf("round %d (%d place replies lost): the first waiter's entry %s, made at revision %d, is now %v", i, p.lost.Load()-lost, first.Key, first.CreateRevision, g.Kvs)
		}
		if err := h.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		a := <-got
		if a.err != nil {
			cancel()
			t.Fatalf("round %d (%d place replies lost): %s: %v", i, p.lost.Load()-lost, a.who, a.err)
		}
		if a.who != "the first waiter" {
			t.Errorf("round %d (%d place replies lost): %s was granted first", i, p.lost.Load()-lost, a.who)
		}
		if a.l.Token() <= h.Token() {
			t.Errorf("round %d: %s's token %d after the holder's %d", i, a.who, a.l.Token(), h.Token())
		}
		if err := a.l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		b := <-got
		if b.err != nil {
			cancel()
			t.Fatalf("round %d: %s: %v", i, b.who, b.err)
		}
		if err := b.l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		r, err = raw.Get(ctx, queue, clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Kvs) != 0 {
			t.Errorf("round %d: after the Unlocks, %s is left", i, r.Kvs[0].Key)
		}
		cancel()
	}
}

// TestAudit38RenewalRepliesLost: a holder renews automatically through
// two endpoints on one member, with a TTL of 3.5 s (a lease of 4 s).
// While the replies on every other renewal stream are lost (the member
// renews), the holder keeps its lease. Then, after renewals pass again
// for a while, both endpoints drop them (nothing reaches the member):
// the lease expires on etcd, and the holder's Done must have closed
// before a rival is granted the key. The holder's watch hears nothing
// then either: Done closes by the holder's own count, not by the news of
// its entry's deletion.
func TestAudit38RenewalRepliesLost(t *testing.T) {
	e := testserver.SharedEtcd(t)
	prefix := fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())
	member := strings.TrimPrefix(e.Endpoints()[0], "http://")
	pa, pb := newLossyProxy(t, member), newLossyProxy(t, member)
	pb.kaStreams = pa.kaStreams
	opts := &Options{Prefix: prefix, Options: lock.Options{TTL: 3500 * time.Millisecond}}
	holder := newTestLocker(t, []string{pa.addr(), pb.addr()}, opts, &netCut{})
	rival := newTestLocker(t, e.Endpoints(), opts, &netCut{})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	k := "audit38-renewal-lost"

	h, err := holder.Lock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	pa.renewals.Store(kaLoseReplies)
	pb.renewals.Store(kaLoseReplies)
	for end := time.Now().Add(8 * time.Second); time.Now().Before(end); {
		select {
		case <-h.Done():
			t.Fatalf("the holder lost its lease while every other renewal stream's replies were lost (%d lost): %v", pa.lostRenews.Load()+pb.lostRenews.Load(), h.Err())
		case <-time.After(250 * time.Millisecond):
		}
		if r, err := rival.TryLock(ctx, k); !errors.Is(err, lock.ErrHeld) {
			if r != nil {
				r.Unlock(ctx)
			}
			t.Fatalf("a rival's TryLock while the key is held: %v", err)
		}
	}
	if pa.lostRenews.Load()+pb.lostRenews.Load() == 0 {
		t.Fatal("no renewal reply was lost: the attack did not happen")
	}

	// a renewal that landed unheard would keep the lease on etcd past
	// what the holder counts: let renewals pass for a while first
	pa.renewals.Store(kaPass)
	pb.renewals.Store(kaPass)
	lost := pa.lostRenews.Load() + pb.lostRenews.Load()
	time.Sleep(2500 * time.Millisecond)
	pa.muteWatch.Store(true)
	pb.muteWatch.Store(true)
	pa.renewals.Store(kaDrop)
	pb.renewals.Store(kaDrop)
	cut := time.Now()
	for {
		if time.Since(cut) > 20*time.Second {
			t.Fatalf("the rival was not granted %v after the holder's renewals stopped reaching etcd", time.Since(cut).Round(time.Millisecond))
		}
		r, err := rival.TryLock(ctx, k)
		if errors.Is(err, lock.ErrHeld) {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-h.Done():
		default:
			t.Fatalf("the rival was granted (token %d) %v after the renewals stopped, while the holder's Done is open", r.Token(), time.Since(cut).Round(time.Millisecond))
		}
		if r.Token() <= h.Token() {
			t.Errorf("the rival's token %d after the holder's %d", r.Token(), h.Token())
		}
		t.Logf("renewal replies lost %d; the rival granted %v after the renewals stopped; the holder: %v", lost, time.Since(cut).Round(time.Millisecond), h.Err())
		r.Unlock(ctx)
		return
	}
}
