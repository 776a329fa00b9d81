package etcd

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestAudit32WatchAfterRestart: after the member restarts (its simple
// tokens forgotten), a URL Locker's watches work again: a holder held
// through the restart and one granted after it see their entry deleted
// at once, and a waiter is woken by a release at once (C10). etcd
// 3.4.21 and later cancel a watch whose token they refuse with watch id
// -1, not the id asked for; the watcher took it for a stale reply, so
// its stream, opened again with the stale token, kept no watch at all.
func TestAudit32WatchAfterRestart(t *testing.T) {
	prefix := fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())
	e := authEtcd(t, prefix)
	e.RequireFaults(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := lock.Open(ctx, fmt.Sprintf("etcd://app:apppw@%s/%s?ttl=30s", e.Addr(), prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	through, err := l.Lock(ctx, "through")
	if err != nil {
		t.Fatal(err)
	}
	// Wait until the log-in is in the member's backend (committed every
	// 100 ms), which a restart does not replay: the token is forgotten.
	time.Sleep(time.Second)
	if err := e.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := e.Restart(); err != nil {
		t.Fatal(err)
	}
	// The watcher opens its stream again, with the stale token.
	time.Sleep(1500 * time.Millisecond)
	// A client of root made after the restart: clientv3's own log-in
	// cannot log in again once its token is forgotten.
	root := userClient(t, e.Endpoints(), "root", "rootpw", nil)
	other := authLocker(t, e, "root", "rootpw", &Options{Prefix: prefix, Options: lock.Options{TTL: 30 * time.Second}})
	after, err := l.Lock(ctx, "after")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		l    *lock.Lease
	}{{"through", through}, {"after", after}} {
		if _, err := root.Delete(ctx, MutexPrefix(prefix, c.name)+"/", clientv3.WithPrefix()); err != nil {
			t.Fatal(err)
		}
		select {
		case <-c.l.Done():
		case <-time.After(2 * time.Second):
			t.Errorf("%s: Done is open 2 s after root deleted the entry (the holder's watch is gone)", c.name)
		}
	}

	ol, err := other.Lock(ctx, "wake")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan time.Time, 1)
	go func() {
		defer close(got)
		wl, err := l.Lock(ctx, "wake")
		if err != nil {
			t.Error(err)
			return
		}
		got <- time.Now()
		wl.Unlock(ctx)
	}()
	time.Sleep(1500 * time.Millisecond)
	rel := time.Now()
	if err := ol.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if at, ok := <-got; ok {
		t.Logf("the waiter was granted %v after the release", at.Sub(rel).Round(time.Millisecond))
		if d := at.Sub(rel); d > 300*time.Millisecond {
			t.Errorf("the waiter was granted %v after the release, want at once (its watch is gone)", d)
		}
	}
}

// TestAudit32WatchAuthEnabled: a URL Locker that logged in while auth
// was off (it has no token) holds a key when auth is turned on and the
// member restarts: its watch stream, opened again with no token, is
// refused with "user name is empty", and must log in, so that the
// holder's Done still closes at once when root deletes its entry.
func TestAudit32WatchAuthEnabled(t *testing.T) {
	prefix := fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())
	e := authEtcd(t, prefix)
	e.RequireFaults(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	root := userClient(t, e.Endpoints(), "root", "rootpw", nil)
	if _, err := root.AuthDisable(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := lock.Open(ctx, fmt.Sprintf("etcd://app:apppw@%s/%s?ttl=30s", e.Addr(), prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	held, err := l.Lock(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rawClient(t, e.Endpoints()).AuthEnable(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.Restart(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // the watcher opens its stream again
	root = userClient(t, e.Endpoints(), "root", "rootpw", nil)
	if _, err := root.Delete(ctx, MutexPrefix(prefix, "held")+"/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held.Done():
	case <-time.After(2 * time.Second):
		t.Errorf("Done is open 2 s after root deleted the entry (the holder's watch is gone)")
	}
}

// TestAudit32WatchTokenExpired: a URL Locker holds a key with no other
// call for longer than its token lives (renewals are keep-alives, which
// etcd does not check), then locks another key: that call logs in
// again, but the watch stream still carries the old token, so the new
// holder's watch is refused (with watch id -1). Its Done must still
// close at once when root deletes its entry. No restart is needed: an
// unused simple token lives 5 minutes by default.
func TestAudit32WatchTokenExpired(t *testing.T) {
	prefix := fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())
	e := authEtcdWith(t, prefix, &testserver.EtcdOptions{AuthTokenTTL: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := lock.Open(ctx, fmt.Sprintf("etcd://app:apppw@%s/%s?ttl=30s", e.Addr(), prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	first, err := l.Lock(ctx, "first")
	if err != nil {
		t.Fatal(err)
	}
	defer first.Unlock(ctx)
	time.Sleep(3 * time.Second) // the token expires
	second, err := l.Lock(ctx, "second")
	if err != nil {
		t.Fatal(err)
	}
	// root's client is made now: clientv3 cannot log in again once its
	// own token expired (it sends the stale one with Authenticate).
	root := userClient(t, e.Endpoints(), "root", "rootpw", nil)
	if _, err := root.Delete(ctx, MutexPrefix(prefix, "second")+"/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-second.Done():
	case <-time.After(2 * time.Second):
		t.Errorf("Done is open 2 s after root deleted the entry (the holder's watch was refused for the stream's old token)")
	}
}
