package zookeeper_test

import (
	"context"
	"log"
	"time"

	"github.com/dlock-go/dlock/driver/zookeeper"
	"github.com/dlock-go/dlock/lock"
	"github.com/go-zookeeper/zk"
)

// New over your own go-zookeeper connection: the Locker leaves it open.
// SessionTimeout must be the session's (the one given to zk.Connect).
func ExampleNew() {
	ctx := context.Background()
	conn, _, err := zk.Connect([]string{"zk1:2181", "zk2:2181", "zk3:2181"}, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	locker := zookeeper.New(conn, &zookeeper.Options{SessionTimeout: 10 * time.Second, Root: "/app/locks"})
	defer locker.Close()

	lease, err := locker.Lock(ctx, "orders/42")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(ctx)
	log.Printf("holding %s with token %d", lease.Key(), lease.Token())
}

// Shared (read) leases: readers share a key, a writer excludes them.
func ExampleDial_readWrite() {
	ctx := context.Background()
	locker, err := zookeeper.Dial(ctx, []string{"zk1:2181"}, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	rw := locker
	r, err := rw.RLock(ctx, "config")
	if err != nil {
		log.Fatal(err)
	}
	defer r.Unlock(ctx)
	// ... read the configuration, passing r.Token() along ...
}

// Opening by URL, with a digest identity whose ACL protects the nodes.
func Example_uRL() {
	ctx := context.Background()
	locker, err := lock.Open(ctx, "zookeeper://app:secret@zk1:2181,zk2:2181,zk3:2181/app/locks?session_timeout=6s")
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
