package etcd

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// authEtcd is an etcd member of its own with auth on: root, an "app"
// user with read-write on prefix, a "reader" with read on it, and
// "nobody", a user with no role, and "queueonly", with read-write on
// the queues and read on the counters.
func authEtcd(t *testing.T, prefix string) *testserver.Etcd {
	t.Helper()
	return authEtcdWith(t, prefix, nil)
}

// authEtcdWith is authEtcd with the member's options.
func authEtcdWith(t *testing.T, prefix string, opts *testserver.EtcdOptions) *testserver.Etcd {
	t.Helper()
	e := testserver.StartEtcd(t, opts)
	c := rawClient(t, e.Endpoints())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	end := clientv3.GetPrefixRangeEnd(prefix)
	steps := []func() error{
		func() error { _, err := c.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := c.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := c.RoleAdd(ctx, "app"); return err },
		func() error {
			_, err := c.RoleGrantPermission(ctx, "app", prefix, end, clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := c.UserAdd(ctx, "app", "apppw"); return err },
		func() error { _, err := c.UserGrantRole(ctx, "app", "app"); return err },
		func() error { _, err := c.RoleAdd(ctx, "reader"); return err },
		func() error {
			_, err := c.RoleGrantPermission(ctx, "reader", prefix, end, clientv3.PermissionType(clientv3.PermRead))
			return err
		},
		func() error { _, err := c.UserAdd(ctx, "reader", "readerpw"); return err },
		func() error { _, err := c.UserGrantRole(ctx, "reader", "reader"); return err },
		func() error { _, err := c.UserAdd(ctx, "nobody", "nobodypw"); return err },
		func() error { _, err := c.RoleAdd(ctx, "queueonly"); return err },
		func() error {
			_, err := c.RoleGrantPermission(ctx, "queueonly", prefix+"q/", clientv3.GetPrefixRangeEnd(prefix+"q/"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error {
			_, err := c.RoleGrantPermission(ctx, "queueonly", prefix+"c/", clientv3.GetPrefixRangeEnd(prefix+"c/"), clientv3.PermissionType(clientv3.PermRead))
			return err
		},
		func() error { _, err := c.UserAdd(ctx, "queueonly", "queueonlypw"); return err },
		func() error { _, err := c.UserGrantRole(ctx, "queueonly", "queueonly"); return err },
		func() error { _, err := c.AuthEnable(ctx); return err },
	}
	for i, s := range steps {
		if err := s(); err != nil {
			t.Fatalf("auth setup step %d: %v", i, err)
		}
	}
	return e
}

func userClient(t *testing.T, endpoints []string, user, pw string, cut *netCut) *clientv3.Client {
	t.Helper()
	cfg := clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(), Username: user, Password: pw}
	if cut != nil {
		cfg.DialOptions = []grpc.DialOption{grpc.WithContextDialer(cut.dial)}
	}
	c, err := clientv3.New(cfg)
	if err != nil {
		t.Fatalf("client of %q: %v", user, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func authLocker(t *testing.T, e *testserver.Etcd, user, pw string, opts *Options) *lock.Locker {
	t.Helper()
	d, lo := newDriver(opts)
	d.c = userClient(t, e.Endpoints(), user, pw, nil)
	l := lock.New(d, lo)
	t.Cleanup(func() { l.Close() })
	return l
}

// TestAuditAuthWatchesAndRights: under auth, (1) a holder's watch works:
// its Done closes at once when its entry is deleted; (2) a waiter is
// woken by a release at once (C10); (3) a user who may write the queue
// but not the counters fails to lock, with the cause, and leaves no
// entry behind (C7), whether its attempt was a Try or a queued wait.
func TestAuditAuthWatchesAndRights(t *testing.T) {
	prefix := fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())
	e := authEtcd(t, prefix)
	root := userClient(t, e.Endpoints(), "root", "rootpw", nil)
	opts := &Options{Prefix: prefix, Options: lock.Options{TTL: 30 * time.Second}}
	a := authLocker(t, e, "app", "apppw", opts)
	b := authLocker(t, e, "app", "apppw", opts)
	q := authLocker(t, e, "queueonly", "queueonlypw", opts)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	k := "audit-auth-watch"
	l, err := a.Lock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := root.Delete(ctx, MutexPrefix(prefix, k)+"/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-time.After(2 * time.Second):
		t.Errorf("a holder's Done is open 2 s after its entry was deleted (its watch does not work under auth)")
	}

	k = "audit-auth-wake"
	l, err = a.Lock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan time.Time, 1)
	go func() {
		if bl, err := b.Lock(ctx, k); err == nil {
			got <- time.Now()
			bl.Unlock(ctx)
		} else {
			t.Error(err)
			close(got)
		}
	}()
	time.Sleep(1500 * time.Millisecond)
	rel := time.Now()
	l.Unlock(ctx)
	if at, ok := <-got; ok {
		if d := at.Sub(rel); d > time.Second {
			t.Errorf("the waiter was granted %v after the release, want within 1 s", d)
		}
	}

	for _, try := range []bool{true, false} {
		k = fmt.Sprintf("audit-auth-queueonly-%v", try)
		var err error
		if try {
			_, err = q.TryLock(ctx, k)
		} else {
			hl, herr := a.Lock(ctx, k)
			if herr != nil {
				t.Fatal(herr)
			}
			go func() { time.Sleep(time.Second); hl.Unlock(ctx) }()
			_, err = q.Lock(ctx, k)
		}
		t.Logf("try=%v: %v", try, err)
		if err == nil {
			t.Errorf("try=%v: a user with no write right on the counters was granted the key", try)
		}
		time.Sleep(500 * time.Millisecond)
		resp, rerr := root.Get(ctx, MutexPrefix(prefix, k)+"/", clientv3.WithPrefix())
		if rerr != nil {
			t.Fatal(rerr)
		}
		for _, kv := range resp.Kvs {
			t.Errorf("try=%v: left behind: %s = %q (lease %x)", try, kv.Key, kv.Value, kv.Lease)
		}
	}
}

// TestAuditURLSecrets: a Locker opened from a URL with a wrong password,
// and one with the right password whose user lacks rights, report
// errors that do not show the password; the right one locks.
func TestAuditURLSecrets(t *testing.T) {
	prefix := fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())
	e := authEtcd(t, prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range []struct{ user, pw, path string }{
		{"app", "Wr0ngSecretPw", prefix},
		{"nobody", "nobodypw", prefix},
		{"app", "apppw", "elsewhere/"},
		{"app", "apppw", prefix},
	} {
		l, err := lock.Open(ctx, fmt.Sprintf("etcd://%s:%s@%s/%s", c.user, c.pw, e.Addr(), c.path))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		ll, err := l.TryLock(ctx, "audit-secrets")
		took := time.Since(start)
		l.Close()
		t.Logf("%s:%s on %s: %v (TryLock %v, with Close %v)", c.user, c.pw, c.path, err, took, time.Since(start))
		if err == nil {
			ll.Unlock(ctx)
			if c.pw != "apppw" || c.path != prefix {
				t.Errorf("%s:%s on %s locked", c.user, c.pw, c.path)
			}
			continue
		}
		if c.pw == "apppw" && c.path == prefix {
			t.Errorf("the app user failed: %v", err)
		}
		if strings.Contains(err.Error(), c.pw) {
			t.Errorf("the error shows the password: %v", err)
		}
	}
}

// TestAuditDefiniteErrorsRetried (finding, low: a refusal is handled as
// an unknown outcome). A user without write rights (or with a wrong
// password) fails TryLock at once; the failure is a gRPC
// PermissionDenied (or an authentication failure before anything was
// sent), which says the write did not land, but the driver returns it as
// an unknown outcome: lock's clean-up then retries Release, whose Txn is
// refused again, in the background until Close's bound, so Close takes
// the whole ReleaseTimeout (the lease the attempt made is revoked only
// after Release's Txn, which is refused: it is left to its TTL). With a
// wrong password every retry makes a new client and authenticates again.
func TestAuditDefiniteErrorsRetried(t *testing.T) {
	prefix := fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())
	e := authEtcd(t, prefix)
	root := userClient(t, e.Endpoints(), "root", "rootpw", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	before, err := root.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, who := range []string{"nobody:nobodypw", "app:Wr0ngPw"} {
		l, err := lock.Open(ctx, fmt.Sprintf("etcd://%s@%s/%s", who, e.Addr(), prefix))
		if err != nil {
			t.Fatal(err)
		}
		_, err = l.TryLock(ctx, "audit-definite")
		start := time.Now()
		l.Close()
		took := time.Since(start)
		t.Logf("%s: TryLock: %v; Close took %v", who, err, took)
		if took > time.Second {
			t.Errorf("%s: Close took %v after a TryLock the server refused (nothing to release)", who, took)
		}
	}
	after, err := root.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(after.Leases) - len(before.Leases); n > 0 {
		t.Errorf("%d lease(s) left behind by the refused attempts", n)
	}
}
