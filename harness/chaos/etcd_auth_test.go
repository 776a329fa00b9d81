package chaos

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestEtcdReaderRights: after EtcdEnableAuth, the reader reads the
// prefix and is refused every write under it (put, delete, revoking a
// lease with a key attached), the application's user writes; and etcd
// lets the reader renew a lease it did not make (LeaseKeepAlive names no
// key): what safety.md's trust model says of etcd.
func TestEtcdReaderRights(t *testing.T) {
	srv := StartServer(t, EtcdBackend, ServerOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := EtcdEnableAuth(ctx, srv.Addrs, "p/"); err != nil {
		t.Fatal(err)
	}
	app, err := EtcdClient(srv.Addrs, EtcdAppUser, EtcdAppPassword)
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	reader, err := EtcdClient(srv.Addrs, EtcdReaderUser, EtcdReaderPassword)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	g, err := app.Grant(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := app.Put(ctx, "p/k", "v", clientv3.WithLease(g.ID)); err != nil {
		t.Fatalf("the application's put: %v", err)
	}
	if r, err := reader.Get(ctx, "p/", clientv3.WithPrefix()); err != nil || len(r.Kvs) != 1 {
		t.Fatalf("the reader's get: %v %v", r, err)
	}
	if _, err := reader.Put(ctx, "p/k", "forged"); !EtcdDenied(err) {
		t.Errorf("the reader's put: %v, want permission denied", err)
	}
	if _, err := reader.Delete(ctx, "p/k"); !EtcdDenied(err) {
		t.Errorf("the reader's delete: %v, want permission denied", err)
	}
	if _, err := reader.Revoke(ctx, g.ID); !EtcdDenied(err) {
		t.Errorf("the reader's revoke: %v, want permission denied", err)
	}
	if _, err := reader.Put(ctx, "other", "x"); !EtcdDenied(err) {
		t.Errorf("the reader's put outside the prefix: %v, want permission denied", err)
	}
	if _, err := reader.KeepAliveOnce(ctx, g.ID); err != nil {
		t.Errorf("the reader's keep-alive of the application's lease: %v (the trust model says etcd allows it)", err)
	}
}
