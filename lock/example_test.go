package lock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/dlock-go/dlock/driver/memory"
	"github.com/dlock-go/dlock/lock"
)

// The examples run on the in-process memory driver; every driver works
// the same way.

func ExampleOpen() {
	ctx := context.Background()
	locker, err := lock.Open(ctx, "memory://example?ttl=10s")
	if err != nil {
		panic(err)
	}
	defer locker.Close()
	lease, err := locker.Lock(ctx, "nightly-report")
	if err != nil {
		panic(err)
	}
	fmt.Println(lease.Key(), lease.TTL())
	lease.Unlock(ctx)

	_, err = lock.Open(ctx, "memory://example?tll=10s")
	fmt.Println(errors.Is(err, lock.ErrInvalid))
	// Output:
	// nightly-report 10s
	// true
}

func ExampleDo() {
	ctx := context.Background()
	locker := memory.New(memory.NewStore(), nil)
	defer locker.Close()
	err := locker.Do(ctx, "nightly-report", func(ctx context.Context) error {
		fmt.Println("running under the lock")
		return nil
	})

	fmt.Println("err:", err)
	// Output:
	// running under the lock
	// err: <nil>
}

func ExampleLease_Done() {
	ctx := context.Background()
	store := memory.NewStore()
	locker := memory.New(store, &lock.Options{TTL: 300 * time.Millisecond})
	defer locker.Close()
	lease, _ := locker.Lock(ctx, "job")
	store.DeleteKey("job") // the grant vanishes behind the holder's back
	<-lease.Done()         // renewal notices within TTL/3
	fmt.Println(errors.Is(lease.Err(), lock.ErrLost))
	// Output: true
}

func ExampleLocker_RLock() {
	ctx := context.Background()
	locker := memory.New(memory.NewStore(), nil)
	defer locker.Close()
	r1, _ := locker.RLock(ctx, "config")
	r2, err := locker.TryRLock(ctx, "config")
	fmt.Println("two readers:", err == nil)
	_, err = locker.TryLock(ctx, "config")
	fmt.Println("writer refused:", errors.Is(err, lock.ErrNotAcquired))
	r1.Unlock(ctx)
	r2.Unlock(ctx)
	// Output:
	// two readers: true
	// writer refused: true
}

// At most three deploys at once: each takes one of three permits of
// "deploys"; a fourth waits until a permit is returned.
func ExampleLocker_Acquire() {
	ctx := context.Background()
	sem := memory.New(memory.NewStore(), nil)
	defer sem.Close()
	// ErrUnsupported, with the reason, on a backend without permits:
	if err := sem.Supports(lock.Permits); err != nil {
		panic(err)
	}
	var permits []*lock.Lease
	for range 3 {
		p, err := sem.TryAcquire(ctx, "deploys", 3)
		if err != nil {
			panic(err)
		}
		permits = append(permits, p)
	}
	_, err := sem.TryAcquire(ctx, "deploys", 3)
	fmt.Println("fourth:", errors.Is(err, lock.ErrNotAcquired))
	_, err = sem.TryAcquire(ctx, "deploys", 5)
	fmt.Println("another limit:", errors.Is(err, lock.ErrInvalid))

	permits[0].Unlock(ctx)
	p, err := sem.Acquire(ctx, "deploys", 3)
	if err != nil {
		panic(err)
	}
	fmt.Println("token above the others:", p.Token() > permits[2].Token(), "limit:", p.Limit())
	// Output:
	// fourth: true
	// another limit: true
	// token above the others: true limit: 3
}

// The README shows this example's code from "set, err :=" to the Unlock
// (internal/testsupport/doccheck checks it).
func ExampleLocker_LockMany() {
	ctx := context.Background()
	locker := memory.New(memory.NewStore(), nil)
	defer locker.Close()

	set, err := locker.LockMany(ctx, []string{"accounts/bob", "accounts/alice"}) // all or none
	if err != nil {
		log.Fatal(err) // none of the set is held; sets never deadlock, whatever their order
	}
	defer set.Unlock(ctx) // every key; set.Done() closes if one is lost; set.Token(key) per key
	tok, _ := set.Token("accounts/alice")
	fmt.Println(set.Keys(), tok > 0, set.Atomic())
	// Output:
	// [accounts/alice accounts/bob] true true
}
