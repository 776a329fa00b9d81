package redisnx_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/dlock-go/dlock/driver/redisnx"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// Example is the README's quick start, as a program's main. It reads the
// server's address from REDIS_ADDR; TestExamples runs it against a test
// server (it has no Output comment: go test -short runs examples, and
// without a server this one could not).
func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")}) // "" is localhost:6379
	defer rdb.Close()
	locker := redisnx.New(rdb, nil) // a *lock.Locker; its Close leaves rdb open
	defer locker.Close()

	// Lock waits until the key is granted or ctx ends. The lease is renewed
	// in the background until Unlock; lease.Done() closes if it is lost.
	lease, err := locker.Lock(ctx, "orders/42")
	if err != nil {
		log.Fatal(err) // errors.Is(err, lock.ErrNotAcquired)
	}
	// Send the fencing token with every write the lock guards: the resource
	// refuses a token lower than the highest it has seen (a stale holder).
	fmt.Println("holding", lease.Key(), "with token", lease.Token())
	if err := lease.Unlock(ctx); err != nil {
		log.Fatal(err)
	}

	// Or Do: fn's ctx carries the lease (send its token with the
	// writes) and ends if it is lost; the lock is released when fn returns.
	err = locker.Do(ctx, "nightly-report", func(ctx context.Context) error {
		fmt.Println("writing the nightly report with token", lock.LeaseFrom(ctx).Token())
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
}

// Example_open is the README's quick start by URL: the backend is a
// matter of configuration. Each driver registers its schemes when its
// package is imported (here redisnx, for redisnx:// and redisnxs://).
func Example_open() {
	ctx := context.Background()
	// DLOCK_URL=redisnx://localhost:6379 (or rediswatch://, postgres://,
	// memcached://, etcd://), with ttl= (zookeeper://: session_timeout=).
	locker, err := lock.Open(ctx, os.Getenv("DLOCK_URL"))
	if err != nil {
		log.Fatal(err) // lock.ErrInvalid for a bad URL; no secret is quoted
	}
	defer locker.Close() // closes the client Open made
	lease, err := locker.Lock(ctx, "orders/42")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(ctx)
	fmt.Println("holding", lease.Key(), "with token", lease.Token())
}

func Example_cluster() {
	rdb := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"},
	})
	defer rdb.Close()
	locker := redisnx.New(rdb, &redisnx.Options{Prefix: "billing:"})
	defer locker.Close()
	_ = locker.Do(context.Background(), "nightly-report", func(ctx context.Context) error {

		return nil
	})

}

// Example_as reaches the client of a Locker that Open made.
func Example_as() {
	// e.g. DLOCK_URL=redisnxs://app:secret@redis.internal:6380/0?ttl=15s
	locker, err := lock.Open(context.Background(), os.Getenv("DLOCK_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close()
	var rdb redis.UniversalClient
	if locker.As(&rdb) {
		fmt.Println(rdb.Ping(context.Background()).Err())
	}
}
