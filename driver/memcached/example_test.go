package memcached_test

import (
	"context"
	"log"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/dlock-go/dlock/driver/memcached"
	"github.com/dlock-go/dlock/lock"
)

// Lock a key on the caller's client, with a 10 s lease renewed every 3 s.
func Example() {
	ctx := context.Background()
	mc := memcache.New("10.0.0.1:11211", "10.0.0.2:11211")
	locker := memcached.New(mc, &memcached.Options{Options: lock.Options{TTL: 10 * time.Second}})
	defer locker.Close() // releases leases still held; mc stays open

	lease, err := locker.Lock(ctx, "orders/42")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(ctx)
	log.Printf("holding orders/42 with fencing token %d", lease.Token())
}

// Open a Locker from a URL; it owns its client.
func Example_open() {
	ctx := context.Background()
	locker, err := lock.Open(ctx, "memcached://10.0.0.1:11211,10.0.0.2:11211?prefix=app:&ttl=15s")
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
