package redisx

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"

	"github.com/redis/go-redis/v9"
)

// BenchmarkLaneTakePut is a lane's cost per call, with no command: taking
// it from the free list and giving it back, with the arm for a context
// that can be cancelled (AfterFunc and its stop) and without.
func BenchmarkLaneTakePut(b *testing.B) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	ls := NewLanes(c, nil)
	defer ls.Close()
	run := func(b *testing.B, ctx context.Context) {
		b.ReportAllocs()
		for range b.N {
			ln, err := ls.take(ctx)
			if err != nil {
				b.Fatal(err)
			}
			ls.put(ln)
		}
	}
	b.Run("armed", func(b *testing.B) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		run(b, ctx)
	})
	b.Run("background", func(b *testing.B) { run(b, context.Background()) })
}

// TestLaneHealthCheck checks when a lane's idle connection gets go-redis's
// health check (checkedConn): a connection the server closed is found by
// the check, and replaced before the command, on a lane idle for longer
// than freshFor; on a fresh lane it is not checked, and the command fails
// on it (no retries here: MaxRetries -1), or, with go-redis's retries,
// goes out again on a new connection.
func TestLaneHealthCheck(t *testing.T) {
	addr := testserver.SharedRedis(t).Addr()
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	ctx := context.Background()
	run := func(t *testing.T, retries int, idle time.Duration) (before, after int64, err error) {
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: retries})
		defer c.Close()
		ls := NewLanes(c, nil)
		defer ls.Close()
		id := func() (n int64, err error) {
			err = ls.Do(ctx, func(c redis.UniversalClient) error {
				n, err = c.ClientID(ctx).Result()
				return err
			})
			return n, err
		}
		if before, err = id(); err != nil {
			t.Fatal(err)
		}
		ln := <-ls.free
		ln.mu.Lock()
		ln.putAt = ln.putAt.Add(-idle)
		ln.mu.Unlock()
		ls.free <- ln
		if err := admin.ClientKillByFilter(ctx, "ID", fmt.Sprint(before)).Err(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // the server's FIN arrives
		after, err = id()
		return before, after, err
	}
	t.Run("idle lane checked", func(t *testing.T) {
		before, after, err := run(t, -1, 2*freshFor)
		if err != nil {
			t.Fatalf("a command on a lane idle for %v, its connection closed by the server: %v; want the health check to replace it", 2*freshFor, err)
		}
		if after == before {
			t.Fatalf("the command ran on the closed connection %d", before)
		}
	})
	t.Run("fresh lane not checked", func(t *testing.T) {
		if _, _, err := run(t, -1, 0); err == nil {
			t.Fatal("a command on a fresh lane whose connection the server closed succeeded without retries: the lane's connection was health-checked")
		}
	})
	t.Run("fresh lane retried", func(t *testing.T) {
		before, after, err := run(t, 0, 0) // go-redis's default retries
		if err != nil {
			t.Fatalf("a fresh lane's command, its connection closed by the server: %v; want go-redis's retry on a new connection", err)
		}
		if after == before {
			t.Fatalf("the command ran on the closed connection %d", before)
		}
	})
}

// TestLaneOptions checks that a lane's client has the options of the
// client it was made from, also where the user turned something off
// (which go-redis's NewClient, given its own result again, would make a
// default).
func TestLaneOptions(t *testing.T) {
	for _, o := range []*redis.Options{
		{Addr: "127.0.0.1:1"},
		{Addr: "127.0.0.1:1", MaxRetries: -1, MinRetryBackoff: -1, MaxRetryBackoff: -1, ReadTimeout: -1, WriteTimeout: -1},
		{Addr: "127.0.0.1:1", ReadTimeout: -2, WriteTimeout: -2},
		{Addr: "127.0.0.1:1", MaxRetries: 7, ReadTimeout: time.Second},
	} {
		c := redis.NewClient(o)
		want := c.Options()
		got := singleLane(want, nil).(*redis.Client).Options()
		if got.MaxRetries != want.MaxRetries || got.MinRetryBackoff != want.MinRetryBackoff || got.MaxRetryBackoff != want.MaxRetryBackoff || got.ReadTimeout != want.ReadTimeout || got.WriteTimeout != want.WriteTimeout {
			t.Errorf("lane of %+v: retries %d, backoff %v..%v, timeouts %v/%v; want %d, %v..%v, %v/%v", *o,
				got.MaxRetries, got.MinRetryBackoff, got.MaxRetryBackoff, got.ReadTimeout, got.WriteTimeout,
				want.MaxRetries, want.MinRetryBackoff, want.MaxRetryBackoff, want.ReadTimeout, want.WriteTimeout)
		}
		c.Close()
	}
}
