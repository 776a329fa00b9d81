package rediswatch

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver/drivertest"
	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/dlock-go/dlock/internal/testsupport/redisacl"
	"github.com/dlock-go/dlock/internal/testsupport/redistest"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// TestConformance runs the suite as an ACL user denied @scripting, then
// checks that no script command was even attempted. rediswatch does all
// the suite checks, here and on a Cluster: no subtest may skip.
func TestConformance(t *testing.T) {
	srv, h := startServer(t)
	drivertest.Run(t, func(t *testing.T) drivertest.Harness { return &harness{url: h.url, admin: h.admin, outage: outage} }, nil)
	assertNoScripts(t, h.admin, srv.Username, srv.Password)
}

// startServer starts a server of the test's own, with a user denied
// @scripting, and returns it with a harness whose Lockers are that user.
func startServer(t *testing.T) (*testserver.Redis, *harness) {
	srv := testserver.StartRedis(t, &testserver.RedisOptions{User: "dlock", ACLRules: []string{"-@scripting"}})
	u := &url.URL{Scheme: Scheme, User: url.UserPassword(srv.Username, srv.Password), Host: srv.Addr()}
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { admin.Close() })
	return srv, &harness{url: u.String(), admin: admin}
}

// outage is a harness on a server of the subtest's own, which the suite
// stops and starts.
func outage(t *testing.T) *drivertest.Outage {
	srv, h := startServer(t)
	return &drivertest.Outage{Harness: h, Stop: srv.Stop, Start: srv.Restart}
}

// TestConformanceCluster runs the suite on the three-master Cluster, as a
// user denied @scripting on every node.
func TestConformanceCluster(t *testing.T) {
	c := testserver.SharedRedisCluster(t)
	admin := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { admin.Close() })
	user, pass := redisacl.ClusterUser(t, admin, "dlock-rediswatch", "-@scripting")
	u := &url.URL{Scheme: Scheme, User: url.UserPassword(user, pass), Host: strings.Join(c.Addrs(), ",")}
	drivertest.Run(t, func(t *testing.T) drivertest.Harness { return &harness{url: u.String(), admin: admin} }, drivertest.Skips{
		"Outage/LockWaits":    "one server covers it (TestConformance)",
		"Outage/TryLockFails": "one server covers it (TestConformance)",
	})
	assertNoScripts(t, admin, user, pass)
}

// harness tampers through admin, a client of the default user.
type harness struct {
	url    string
	admin  redis.UniversalClient
	outage func(t *testing.T) *drivertest.Outage
}

func (h *harness) NewLocker(t *testing.T, o *lock.Options) *lock.Locker {
	u := h.url
	if o != nil && o.TTL != 0 {
		u += "?ttl=" + o.TTL.String()
	}
	l, err := lock.Open(context.Background(), u)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// Crash closes the Locker's client: its traffic stops, nothing is released.
func (h *harness) Crash(t *testing.T, l *lock.Locker) {
	var c redis.UniversalClient
	if !l.As(&c) {
		t.Fatalf("not a rediswatch Locker")
	}
	c.Close()
	var ls *redisx.Lanes
	if l.As(&ls) {
		ls.Close() // the Locker's own connections
	}
}

// names maps keys to Redis names as the driver does.
var names = testDriver(nil, DefaultPrefix)

// DeleteKey deletes every grant of key: the lock key, and the sets of its
// shares, holds and permits (a permit is a member of its set; the lock key
// alone deleted is TestPermitLockKeyDeleted's case).
func (h *harness) DeleteKey(ctx context.Context, key string) error {
	lk := names.LockKey(key)
	return h.admin.Del(ctx, lk, readersKey(lk), holdsKey(lk), permitsKey(lk)).Err()
}

func (h *harness) StealKey(ctx context.Context, key string) error {
	return h.admin.Set(ctx, names.LockKey(key), "foreign-owner", time.Minute).Err()
}

func (h *harness) DeleteCounter(ctx context.Context, key string) error {
	return h.admin.Del(ctx, counterKey(names.LockKey(key))).Err()
}

// Residue lists the lock key, the queue and its entries, the readers, holds
// and permits, and any tombstone without an expiry. Tombstones with one are
// not residue: a clean-up after a request whose reply was lost (a grant,
// or a join cancelled on its way) leaves one, which expires by itself.
func (h *harness) Residue(ctx context.Context, key string) ([]string, error) {
	lk := names.LockKey(key)
	node := h.admin
	if c, ok := h.admin.(*redis.ClusterClient); ok {
		n, err := c.MasterForKey(ctx, lk)
		if err != nil {
			return nil, err
		}
		node = n
	}
	var left []string
	for _, k := range []string{lk, waitQueue(lk), readersKey(lk), holdsKey(lk), permitsKey(lk)} {
		if n, err := node.Exists(ctx, k).Result(); err != nil {
			return nil, err
		} else if n > 0 {
			left = append(left, k)
		}
	}
	for _, prefix := range []string{tombstone(lk, ""), waitEntry(lk, ""), grantRecord(lk, "")} {
		found, err := redistest.Scan(ctx, node, prefix)
		if err != nil {
			return nil, err
		}
		for _, k := range found {
			if prefix == tombstone(lk, "") && node.PTTL(ctx, k).Val() > 0 {
				continue
			}
			left = append(left, k)
		}
	}
	return left, nil
}

func (h *harness) Caps() drivertest.Caps {
	return drivertest.Caps{Notify: true, Shared: true, DeletableCounter: true, Resume: true, Reentry: true, Permits: true, Notes: true, Inspect: inspectCaps, Outage: h.outage}
}
