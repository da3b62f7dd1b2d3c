package pgtest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/pgsweep/pgsweep"
)

// RetentionResult is what one cleaner's RetentionRun returned.
type RetentionResult struct {
	Pass pgsweep.RetentionPass
	Ran  bool
	Err  error
}

// RetentionRace starts one RetentionRun of policy on each client at the
// same instant (owner cleaner-<i>, a budget of 2 minutes) and returns what
// each returned, in the clients' order, once all are done: the cleaners of
// the concurrency tests, each on its own connection.
func RetentionRace(clients []*pgsweep.Client, policy string) []RetentionResult {
	res := make([]RetentionResult, len(clients))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, c := range clients {
		wg.Go(func() {
			<-start
			p, ran, err := c.RetentionRun(context.Background(), policy, fmt.Sprintf("cleaner-%d", i), 2*time.Minute)
			res[i] = RetentionResult{p, ran, err}
		})
	}
	close(start)
	wg.Wait()
	return res
}
