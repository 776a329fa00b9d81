package etcd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// grpcProxy forwards every gRPC call to one etcd member, message by
// message, and can hold what the member sends on Watch streams alone
// (holdWatch) while every other call passes: a watch stream cut off
// while unary calls and keep-alives flow.
type grpcProxy struct {
	ln      net.Listener
	srv     *grpc.Server
	backend *grpc.ClientConn

	watches atomic.Int64 // Watch streams opened

	mu      sync.Mutex
	held    chan struct{} // while set, Watch replies wait; closed by releaseWatch
	refused bool          // Watch streams are refused (Unavailable)
}

// refuseWatch makes the proxy refuse every Watch stream at once, and end
// those open: the member's watch service down, the rest up.
func (p *grpcProxy) refuseWatch() {
	p.mu.Lock()
	p.refused = true
	p.mu.Unlock()
	p.releaseWatch()
}

// rawCodec passes messages through as bytes.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

func newGRPCProxy(t *testing.T, target string) *grpcProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	p := &grpcProxy{ln: ln, backend: cc}
	p.srv = grpc.NewServer(grpc.ForceServerCodec(rawCodec{}), grpc.UnknownServiceHandler(p.handle))
	go p.srv.Serve(ln)
	t.Cleanup(func() { p.releaseWatch(); p.srv.Stop(); cc.Close() })
	return p
}

func (p *grpcProxy) addr() string { return p.ln.Addr().String() }

// holdWatch holds every reply on Watch streams, open ones included.
func (p *grpcProxy) holdWatch() {
	p.mu.Lock()
	if p.held == nil {
		p.held = make(chan struct{})
	}
	p.mu.Unlock()
}

func (p *grpcProxy) releaseWatch() {
	p.mu.Lock()
	if p.held != nil {
		close(p.held)
		p.held = nil
	}
	p.mu.Unlock()
}

func (p *grpcProxy) waitWatch(ctx context.Context) {
	p.mu.Lock()
	h := p.held
	p.mu.Unlock()
	if h != nil {
		select {
		case <-h:
		case <-ctx.Done():
		}
	}
}

func (p *grpcProxy) refusing() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refused
}

const watchMethod = "/etcdserverpb.Watch/Watch"

// handle forwards one call: the client's messages up, the member's
// down (a Watch's held while holdWatch), then the member's status.
func (p *grpcProxy) handle(_ any, ss grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(ss)
	ctx := ss.Context()
	md, _ := metadata.FromIncomingContext(ctx)
	ctx, cancel := context.WithCancel(metadata.NewOutgoingContext(ctx, md))
	defer cancel()
	cs, err := p.backend.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method)
	if err != nil {
		return err
	}
	watch := method == watchMethod
	if watch {
		p.watches.Add(1)
		if p.refusing() {
			return status.Error(codes.Unavailable, "watch refused by the test proxy")
		}
	}
	go func() {
		for {
			var b []byte
			if err := ss.RecvMsg(&b); err != nil {
				cs.CloseSend()
				return
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
		if watch {
			p.waitWatch(ctx)
			if p.refusing() {
				return status.Error(codes.Unavailable, "watch refused by the test proxy")
			}
		}
		if err := ss.SendMsg(&b); err != nil {
			return err
		}
	}
}

// TestAudit38WatchHeld: the member holds the Locker's watch stream alone
// (its events, and its answers to progress requests, never come) while
// every other call passes. A holder's Done still closes on its entry's
// deletion by its next renewal, a waiter is still granted by its next
// heartbeat step after the release, and the watcher, hearing nothing
// for progressSilence, opens its stream again.
func TestAudit38WatchHeld(t *testing.T) {
	e := testserver.SharedEtcd(t)
	p := newGRPCProxy(t, e.Addr())
	opts := &Options{Prefix: fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano()), Options: lock.Options{TTL: 6 * time.Second}}
	a := newTestLocker(t, []string{"http://" + p.addr()}, opts, &netCut{})
	b := newTestLocker(t, []string{"http://" + p.addr()}, opts, &netCut{})
	raw := rawClient(t, e.Endpoints())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	la, err := a.Lock(ctx, "watch-held-1")
	if err != nil {
		t.Fatal(err)
	}
	l2, err := a.Lock(ctx, "watch-held-2")
	if err != nil {
		t.Fatal(err)
	}
	granted := make(chan *lock.Lease, 1)
	go func() {
		l, err := b.Lock(ctx, "watch-held-1")
		if err != nil {
			t.Error(err)
		}
		granted <- l
	}()
	// A healthy stream answers the progress requests: it is kept. (Each
	// Locker opens its first stream in the background.)
	for end := time.Now().Add(5 * time.Second); p.watches.Load() < 2 && time.Now().Before(end); {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	streams := p.watches.Load()
	time.Sleep(progressSilence + 1500*time.Millisecond)
	if n := p.watches.Load() - streams; n != 0 {
		t.Errorf("a healthy watch stream was opened again %d times in %v", n, progressSilence+1500*time.Millisecond)
	}
	p.holdWatch()
	streams = p.watches.Load()
	held := time.Now()
	time.Sleep(time.Second)

	// 6 s TTL: a renewal every 2 s finds the entry gone.
	n := (&harness{prefix: opts.Prefix}).names("watch-held-2")
	if _, err := raw.Delete(ctx, n.queue, clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	select {
	case <-l2.Done():
		t.Logf("Done %v after the deletion", time.Since(deleted).Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		t.Errorf("with the watch stream held, Done did not close within 5 s of the entry's deletion (renewals every 2 s)")
	}

	released := time.Now()
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-granted:
		t.Logf("the waiter was granted %v after the release", time.Since(released).Round(time.Millisecond))
		if l != nil {
			l.Unlock(ctx)
		}
	case <-time.After(4 * time.Second):
		t.Errorf("with the watch stream held, the waiter was not granted within 4 s of the release (heartbeat steps every 1 s)")
	}

	time.Sleep(time.Until(held.Add(2*progressSilence + 2*time.Second)))
	if got := p.watches.Load() - streams; got < 1 {
		t.Errorf("no watch stream opened again in %v of silence (progressSilence %v)", time.Since(held).Round(time.Millisecond), progressSilence)
	} else {
		t.Logf("%d watch streams opened again in %v of silence", got, time.Since(held).Round(time.Millisecond))
	}
}

// TestAudit38WatchRefused: the member refuses the watch stream at once,
// again and again, while every other call passes. Each failure of the
// stream wakes every waiter to step; the watcher opens it again after a
// delay that doubles up to a second, so that waiters step about once a
// second (their heartbeat), not ten times. A waiter is still granted by
// its next step after the release.
func TestAudit38WatchRefused(t *testing.T) {
	e := testserver.SharedEtcd(t)
	p := newGRPCProxy(t, e.Addr())
	opts := &Options{Prefix: fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())}
	a := newTestLocker(t, []string{"http://" + p.addr()}, opts, &netCut{})
	b := newTestLocker(t, []string{"http://" + p.addr()}, opts, &netCut{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	la, err := a.Lock(ctx, "watch-refused")
	if err != nil {
		t.Fatal(err)
	}
	granted := make(chan *lock.Lease, 1)
	go func() {
		l, err := b.Lock(ctx, "watch-refused")
		if err != nil {
			t.Error(err)
		}
		granted <- l
	}()
	time.Sleep(time.Second)
	p.refuseWatch()
	opened := p.watches.Load()
	const window = 6 * time.Second
	time.Sleep(window)
	// Two Lockers, two streams, each opened again after 100, 200, 400,
	// 800 ms, then once a second: about 16 in 6 s (120 with a fixed
	// 100 ms).
	if n := p.watches.Load() - opened; n > 30 {
		t.Errorf("the watch stream, refused at once, was opened %d times in %v: every waiter stepped as often", n, window)
	} else {
		t.Logf("the watch stream was opened %d times in %v", n, window)
	}
	released := time.Now()
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-granted:
		t.Logf("the waiter was granted %v after the release", time.Since(released).Round(time.Millisecond))
		if l != nil {
			l.Unlock(ctx)
		}
	case <-time.After(4 * time.Second):
		t.Errorf("with the watch stream refused, the waiter was not granted within 4 s of the release (heartbeat steps every 1 s)")
	}
}
