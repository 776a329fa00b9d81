package lock_test

import (
	"context"
	"fmt"
	"log"

	"github.com/dlock-go/dlock/driver/memory"
)

func ExampleElection() {
	ctx := context.Background()
	locker := memory.New(memory.NewStore(), nil) // or lock.Open(ctx, url): any backend
	defer locker.Close()
	election, err := locker.Election("scheduler")
	if err != nil {
		log.Fatal(err)
	}
	// Campaign blocks until this instance leads; the lease is its term, and
	// its token the term number: send it with every write, as a fence.
	term, err := election.Campaign(ctx, "host-a:8080")
	if err != nil {
		log.Fatal(err)
	}
	// Every instance can ask who leads (or Observe the changes).
	leader, err := election.Leader(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(leader.Announcement, "leads in term", leader.Term == term.Token())
	// Lead until term.Done() closes (the term is lost: stop at once), or resign:
	term.Unlock(ctx)
	// Output: host-a:8080 leads in term true
}
