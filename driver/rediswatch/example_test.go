package rediswatch_test

import (
	"context"
	"fmt"
	"log"

	"github.com/dlock-go/dlock/driver/rediswatch"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// A Locker over your own client, connected as a user that may not run
// scripts.
func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", Username: "app", Password: "secret"})
	defer rdb.Close()
	locker := rediswatch.New(rdb, nil)
	defer locker.Close()

	lease, err := locker.Lock(ctx, "orders/42")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(ctx)
	fmt.Println("fencing token", lease.Token())
}

// A Locker from a URL: a Redis Cluster, with its own key prefix. The
// Locker owns the client it opened.
func Example_open() {
	ctx := context.Background()
	locker, err := lock.Open(ctx, "rediswatch://app:secret@10.0.0.1:6379,10.0.0.2:6379?prefix=billing:&ttl=10s")
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	err = locker.Do(ctx, "nightly-report", func(ctx context.Context) error {
		return nil
	})

	if err != nil {
		log.Fatal(err)
	}
}

// The driver's counters, through lock.As.
func ExampleStats() {
	var locker *lock.Locker // from rediswatch.New or lock.Open
	var s rediswatch.Stats
	if locker.As(&s) {
		fmt.Println("aborted grants:", s.GrantAborts, "given up:", s.GaveUp)
	}
}
