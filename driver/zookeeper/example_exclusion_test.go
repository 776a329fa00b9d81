package zookeeper_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	_ "github.com/dlock-go/dlock/driver/zookeeper"
	"github.com/dlock-go/dlock/lock"
)

// Example_exclusion runs against a server: $DLOCK_EXAMPLE_URL names it
// (the package's tests set it to their server's), e.g.
// zookeeper://localhost:2181. Two Lockers stand for two processes: while
// one holds the key, the other's TryLock is refused; after the Unlock it
// is granted, with a higher fencing token.
func Example_exclusion() {
	ctx := context.Background()
	url := os.Getenv("DLOCK_EXAMPLE_URL")
	a, err := lock.Open(ctx, url)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer a.Close()
	b, err := lock.Open(ctx, url)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()

	lease, err := a.Lock(ctx, "example/orders/42")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("locked; token > 0:", lease.Token() > 0)
	_, err = b.TryLock(ctx, "example/orders/42")
	fmt.Println("b while a holds:", errors.Is(err, lock.ErrNotAcquired))
	first := lease.Token()
	if err := lease.Unlock(ctx); err != nil {
		fmt.Println(err)
		return
	}
	lease, err = b.TryLock(ctx, "example/orders/42")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lease.Unlock(ctx)
	fmt.Println("b after the Unlock; token increased:", lease.Token() > first)
	// Output:
	// locked; token > 0: true
	// b while a holds: true
	// b after the Unlock; token increased: true
}
