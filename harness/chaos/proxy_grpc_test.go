package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestProxyGRPC: through the proxy, etcd calls work; a lost Txn reply
// fails the call although etcd applied it; a held keep-alive reply comes
// late; Range passes while a Txn's reply is lost on another stream.
func TestProxyGRPC(t *testing.T) {
	e := testserver.StartEtcd(t, nil)
	p, err := NewProxy(e.Addrs()[0], GRPC)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{p.Addr()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, "grpc/a", "1"); err != nil {
		t.Fatal(err)
	}
	// Requests etcd never answers (cancelling watches that do not exist)
	// wait ahead of the Txn: a proxy that paired replies in order would
	// give the Txn's reply frames (headers, message, trailers) to them,
	// and lose none.
	ws, err := pb.NewWatchClient(c.ActiveConnection()).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for id := range int64(4) {
		if err := ws.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CancelRequest{CancelRequest: &pb.WatchCancelRequest{WatchId: 12345 + id}}}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond)
	rule := p.DropReplies(func(q Request) bool { return q.Cmd == "Txn" && q.Mutating }, 1)
	_, err = c.Txn(ctx).Then(clientv3.OpPut("grpc/b", "2")).Commit()
	if err == nil {
		t.Fatal("the Txn whose reply was lost succeeded")
	}
	select {
	case q := <-rule.Dropped():
		if len(q.Paths) != 1 || q.Paths[0] != "grpc/b" || q.Args[0] != "put" {
			t.Fatalf("lost reply's request: %+v", q)
		}
	default:
		t.Fatal("no lost reply reported")
	}
	var got *clientv3.GetResponse
	for range 50 { // the client reconnects
		if got, err = c.Get(ctx, "grpc/b"); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil || len(got.Kvs) != 1 {
		t.Fatalf("etcd did not apply the Txn whose reply was lost: %v %v", got, err)
	}
	g, err := c.Grant(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	hold := p.HoldReplies(func(q Request) bool { return q.Cmd == "LeaseKeepAlive" }, 1, time.Second, nil)
	start := time.Now()
	if _, err := c.KeepAliveOnce(ctx, g.ID); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 900*time.Millisecond {
		t.Fatalf("held keep-alive reply came after %v", d)
	}
	if len(hold.Dropped()) != 1 {
		t.Fatal("held reply not reported")
	}
	if errs := p.ParseErrors(); len(errs) > 0 {
		t.Fatal(errs)
	}
}
