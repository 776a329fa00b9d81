package memory_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/dlock-go/dlock/driver/memory"
	"github.com/dlock-go/dlock/lock"
)

func Example() {
	ctx := context.Background()
	store := memory.NewStore()
	a, b := memory.New(store, nil), memory.New(store, nil) // two "processes"
	defer a.Close()
	defer b.Close()

	lease, err := a.Lock(ctx, "orders/42")
	if err != nil {
		panic(err)
	}
	_, err = b.TryLock(ctx, "orders/42")
	fmt.Println("b while a holds:", errors.Is(err, lock.ErrNotAcquired))

	first := lease.Token()
	lease.Unlock(ctx)
	lease, _ = b.Lock(ctx, "orders/42")
	fmt.Println("token increased:", lease.Token() > first)
	lease.Unlock(ctx)
	// Output:
	// b while a holds: true
	// token increased: true
}
