package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/dlock-go/dlock/driver/redisnx"
	"github.com/dlock-go/dlock/driver/rediswatch"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { testserver.Main(m) }

// The peers themselves, not a copy of their algorithm: a redsync Mutex and
// a redislock lock on a dlock key's Redis name exclude dlock's writers,
// readers and permits on that key, and are excluded by each of them; after
// a dlock release the peers get the key at once.
func TestPeerInterop(t *testing.T) {
	srv := testserver.StartRedis(t, nil)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	rs := redsync.New(redsyncredis.NewPool(rdb))
	rl := redislock.New(rdb)

	for _, d := range []struct {
		name string
		new  func() lock.Locker
	}{
		{"redisnx", func() lock.Locker { return redisnx.New(rdb, nil) }},
		{"rediswatch", func() lock.Locker { return rediswatch.New(rdb, nil) }},
	} {
		t.Run(d.name, func(t *testing.T) {
			l := d.new()
			t.Cleanup(func() { l.Close() })
			rw, ok := l.(lock.RWLocker)
			if !ok {
				t.Fatal("not an RWLocker")
			}
			sem, err := lock.Semaphores(l)
			if err != nil {
				t.Fatal(err)
			}
			modes := []struct {
				name string
				take func(ctx context.Context, k string) (*lock.Lease, error)
			}{
				{"writer", func(ctx context.Context, k string) (*lock.Lease, error) { return l.TryLock(ctx, k) }},
				{"reader", func(ctx context.Context, k string) (*lock.Lease, error) { return rw.TryRLock(ctx, k) }},
				{"permit", func(ctx context.Context, k string) (*lock.Lease, error) { return sem.TryAcquire(ctx, k, 3) }},
			}
			peers := []struct {
				name string
				// take locks name (a Redis key) for the peer; the release it
				// returns is the peer's own unlock.
				take func(ctx context.Context, name string) (release func() error, err error)
			}{
				{"redsync", func(ctx context.Context, name string) (func() error, error) {
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
				{"redislock", func(ctx context.Context, name string) (func() error, error) {
					lk, err := rl.Obtain(ctx, name, 30*time.Second, nil)
					if err != nil {
						return nil, err
					}
					return func() error { return lk.Release(context.Background()) }, nil
				}},
			}
			for _, p := range peers {
				for _, m := range modes {
					t.Run(p.name+"/"+m.name, func(t *testing.T) {
						ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
						defer cancel()
						k := "interop/" + d.name + "/" + p.name + "/" + m.name + "/" + time.Now().Format("150405.000000000")
						name := "dlock:{" + k + "}" // the Redis name of k's lock (redisnx.DefaultPrefix)

						// The peer first: dlock's attempt is refused.
						release, err := p.take(ctx, name)
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
						if _, err := p.take(ctx, name); err == nil {
							t.Fatalf("%s got the key while a dlock %s held it", p.name, m.name)
						}
						if err := lease.Unlock(ctx); err != nil {
							t.Fatalf("dlock Unlock: %v", err)
						}
						release, err = p.take(ctx, name)
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
