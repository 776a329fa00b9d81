package redisnx

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// minimalRules is the ACL rule set the package doc ("Permissions") says is
// enough on a standalone server. Commands a script calls are checked
// against the user's rules too.
var minimalRules = strings.Fields("-@all +@connection +evalsha +eval +get +set +del +exists +pexpire +pttl +incr +time +hget +hset +hdel +zadd +zscore +zrange +zrem +publish +subscribe +unsubscribe resetkeys ~dlock:* resetchannels &dlock:*")

// Every operation works as a user allowed only what the package doc lists:
// grants, a held key, batched renewals, Refresh, a queued waiter handed the
// key, a waiter woken by a release, Unlock and Close; and the server's ACL
// LOG shows no refusal on the way.
func TestMinimalPermissions(t *testing.T) {
	srv := testserver.StartRedis(t, &testserver.RedisOptions{User: "dlock-min", ACLRules: minimalRules})
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer admin.Close()
	u := url.URL{Scheme: Scheme, User: url.UserPassword(srv.Username, srv.Password), Host: srv.Addr()}
	ctx := tctx(t, 30*time.Second)
	a, err := lock.Open(ctx, u.String()+"?ttl=300ms")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := lock.Open(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var leases []*lock.Lease
	for range 3 {
		lease, err := a.TryLock(ctx, testKey(t))
		if err != nil {
			t.Fatalf("TryLock: %v", err)
		}
		leases = append(leases, lease)
	}
	if _, err := b.TryLock(ctx, leases[0].Key()); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryLock on a held key: %v", err)
	}
	time.Sleep(700 * time.Millisecond) // two TTLs: only renewals keep them
	for _, l := range leases {
		if err := l.Err(); err != nil {
			t.Fatalf("lease lost despite auto-renewal: %v", err)
		}
	}
	if err := leases[2].Refresh(ctx, time.Second); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	// A waiter with a retry strategy (woken through Subscribe), and one
	// in the queue (handed the key).
	for i, opts := range [][]lock.Option{{lock.WithRetry(lock.LinearBackoff(time.Hour))}, nil} {
		got := make(chan error, 1)
		go func() {
			l, err := b.Lock(ctx, leases[i].Key(), opts...)
			if err == nil {
				err = l.Unlock(ctx)
			}
			got <- err
		}()
		time.Sleep(100 * time.Millisecond)
		if err := leases[i].Unlock(ctx); err != nil {
			t.Fatalf("Unlock: %v", err)
		}
		select {
		case err := <-got:
			if err != nil {
				t.Fatalf("waiter %d: %v", i, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("waiter %d not woken by the release", i)
		}
	}
	for _, l := range []lock.Locker{a, b} {
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	entries, err := admin.ACLLog(c, 1000).Result()
	if err != nil {
		t.Fatalf("ACL LOG: %v", err)
	}
	for _, e := range entries {
		if e.Username == srv.Username {
			t.Errorf("%s refused %q to the driver's user (%s) %d time(s)", e.Reason, e.Object, e.Context, e.Count)
		}
	}
}
