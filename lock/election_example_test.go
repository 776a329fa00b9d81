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
	election, err := locker.Election("scheduler") // one leader at a time among all instances
	if err != nil {
		log.Fatal(err)
	}
	term, err := election.Campaign(ctx, "host-a:8080") // blocks until this instance leads
	if err != nil {
		log.Fatal(err)
	}
	defer term.Unlock(ctx) // resign; term.Done() closes if the term is lost, before another is elected
	// term.Token() is the term number, a fencing token; Leader and Observe tell who leads.
	leader, err := election.Leader(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(leader.Announcement, "leads in term", leader.Term == term.Token())
	// Output: host-a:8080 leads in term true
}
