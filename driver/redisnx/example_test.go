package redisnx_test

import (
	"context"
	"fmt"
	"os"

	"github.com/dlock-go/dlock/driver/redisnx"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	locker := redisnx.New(rdb, nil)
	defer locker.Close()

	lease, err := locker.Lock(ctx, "orders/42")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lease.Unlock(ctx)
	fmt.Println("holding orders/42 with token", lease.Token())
}

func Example_cluster() {
	rdb := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"},
	})
	defer rdb.Close()
	locker := redisnx.New(rdb, &redisnx.Options{Prefix: "billing:"})
	defer locker.Close()
	_ = lock.Do(context.Background(), locker, "nightly-report", func(ctx context.Context) error {
		// ctx ends if the lease is lost.
		return nil
	})
}

func Example_open() {
	// e.g. DLOCK_URL=redisnxs://app:secret@redis.internal:6380/0?ttl=15s
	locker, err := lock.Open(context.Background(), os.Getenv("DLOCK_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close()
	var rdb redis.UniversalClient
	if lock.As(locker, &rdb) {
		fmt.Println(rdb.Ping(context.Background()).Err())
	}
}
