package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/dlock-go/dlock/driver/redisnx"
	"github.com/dlock-go/dlock/driver/rediswatch"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"
)

func TestMain(m *testing.M) { testserver.Main(m) }

// The peers themselves, not a copy of their algorithm: a redsync Mutex, a
// redislock lock and a rueidislock lock (one key, under a dlock prefix
// that names it) on a dlock key's Redis name exclude dlock's writers,
// readers and permits on that key, and are excluded by each of them; after
// a dlock release the peers get the key at once.
func TestPeerInterop(t *testing.T) {
	srv := testserver.StartRedis(t, nil)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	rs := redsync.New(redsyncredis.NewPool(rdb))
	rlock := redislock.New(rdb)

	// rueidislock names its keys "<KeyPrefix>:<i>:<name>": with one key
	// (KeyMajority 1, its setting for one server) and name "{K}", its key
	// is the lock of dlock's K under the prefix "<KeyPrefix>:0:".
	rlk, err := rueidislock.NewLocker(rueidislock.LockerOption{
		ClientOption: rueidis.ClientOption{InitAddress: []string{srv.Addr()}},
		KeyPrefix:    "rueidis", KeyMajority: 1, NoLoopTracking: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rlk.Close)
	const rueidisPrefix = "rueidis:0:"

	for _, d := range []struct {
		name string
		new  func(prefix string) *lock.Locker
	}{
		{"redisnx", func(p string) *lock.Locker { return redisnx.New(rdb, &redisnx.Options{Prefix: p}) }},
		{"rediswatch", func(p string) *lock.Locker { return rediswatch.New(rdb, &rediswatch.Options{Prefix: p}) }},
	} {
		t.Run(d.name, func(t *testing.T) {
			l := d.new(redisnx.DefaultPrefix)
			t.Cleanup(func() { l.Close() })
			rl := d.new(rueidisPrefix)
			t.Cleanup(func() { rl.Close() })
			peers := []struct {
				name string
				l    *lock.Locker // the dlock Locker whose keys the peer shares
				// take locks the Redis key of dlock's k for the peer; the
				// release it returns is the peer's own unlock.
				take func(ctx context.Context, k string) (release func() error, err error)
			}{
				{"redsync", l, func(ctx context.Context, k string) (func() error, error) {
					name := redisnx.DefaultPrefix + "{" + k + "}"
					m := rs.NewMutex(name, redsync.WithTries(1), redsync.WithExpiry(30*time.Second))
					if err := m.TryLockContext(ctx); err != nil {
						return nil, err
					}
					return func() error {
						if ok, err := m.UnlockContext(context.Background()); !ok || err != nil {
							return errors.Join(errors.New("redsync: unlock refused"), err)
						}
						return nil
					}, nil
				}},
				{"redislock", l, func(ctx context.Context, k string) (func() error, error) {
					lk, err := rlock.Obtain(ctx, redisnx.DefaultPrefix+"{"+k+"}", 30*time.Second, nil)
					if err != nil {
						return nil, err
					}
					return func() error { return lk.Release(context.Background()) }, nil
				}},
				{"rueidislock", rl, func(ctx context.Context, k string) (func() error, error) {
					held, release, err := rlk.TryWithContext(ctx, "{"+k+"}")
					if err != nil {
						return nil, err
					}
					return func() error {
						// Its lock ends when rueidislock sees its key
						// changed: dlock's refused attempts leave it be.
						lost := held.Err()
						release()
						if lost != nil {
							return errors.New("rueidislock: lock lost while held")
						}
						return nil
					}, nil
				}},
			}
			for _, p := range peers {
				rw, sem := p.l, p.l
				if err := errors.Join(rw.Supports(lock.SharedLeases), sem.Supports(lock.Permits)); err != nil {
					t.Fatal(err)
				}
				modes := []struct {
					name string
					take func(ctx context.Context, k string) (*lock.Lease, error)
				}{
					{"writer", func(ctx context.Context, k string) (*lock.Lease, error) { return p.l.TryLock(ctx, k) }},
					{"reader", func(ctx context.Context, k string) (*lock.Lease, error) { return rw.TryRLock(ctx, k) }},
					{"permit", func(ctx context.Context, k string) (*lock.Lease, error) { return sem.TryAcquire(ctx, k, 3) }},
				}
				for _, m := range modes {
					t.Run(p.name+"/"+m.name, func(t *testing.T) {
						ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
						defer cancel()
						k := "interop/" + d.name + "/" + p.name + "/" + m.name + "/" + time.Now().Format("150405.000000000")
						// The peer first: dlock's attempt is refused.
						release, err := p.take(ctx, k)
						if err != nil {
							t.Fatalf("%s on a free key: %v", p.name, err)
						}
						if _, err := m.take(ctx, k); !errors.Is(err, lock.ErrNotAcquired) {
							t.Fatalf("dlock %s while %s holds the key: err = %v, want ErrNotAcquired", m.name, p.name, err)
						}
						if err := release(); err != nil {
							t.Fatalf("%s release: %v", p.name, err)
						}

						// dlock first: the peer is refused, and gets the key
						// once dlock released it.
						lease, err := m.take(ctx, k)
						if err != nil {
							t.Fatalf("dlock %s after %s released: %v", m.name, p.name, err)
						}
						if _, err := p.take(ctx, k); err == nil {
							t.Fatalf("%s got the key while a dlock %s held it", p.name, m.name)
						}
						if err := lease.Unlock(ctx); err != nil {
							t.Fatalf("dlock Unlock: %v", err)
						}
						release, err = p.take(ctx, k)
						if err != nil {
							t.Fatalf("%s after dlock released: %v", p.name, err)
						}
						if err := release(); err != nil {
							t.Fatalf("%s release: %v", p.name, err)
						}
					})
				}
			}
		})
	}
}
