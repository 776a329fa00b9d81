package main

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// Scenario 6: a semaphore of semLimit permits on one key, with contenders
// looping as in the hot-key scenario (want a permit, Acquire, count the
// grant, Unlock, want it again). No Go peer library has a distributed
// semaphore (Redisson's RSemaphore and Curator's InterProcessSemaphoreV2
// are Java), so each driver's permits run interleaved with the same
// driver's exclusive lock on a hot key, and against the backend's round
// trips (the baseline). More than semLimit holders at once would show as
// overlapping grants.
const (
	scenSemaphore = "6 semaphore of %d permits, %d contenders"
	semLimit      = 4
)

// semaphoreLibs returns, for backend, each dlock driver that grants
// permits twice: taking permits, and taking its exclusive lock.
func semaphoreLibs(cfg *config, backend string) []lib {
	var ls []lib
	for _, l := range cfg.libs(backend) {
		if l.peer || l.plain || l.backend == "memcached" { // memcached grants no permits
			continue
		}
		lk := l
		lk.name, lk.note = l.name+" lock", "the same driver's exclusive lock on one key"
		sem := l
		sem.name, sem.note = fmt.Sprintf("%s permit/%d", l.name, semLimit), fmt.Sprintf("Locker.Acquire(ctx, key, %d)", semLimit)
		open := l.open
		sem.open = func(ctx context.Context, addr string) (client, error) {
			c, err := open(ctx, addr)
			if err != nil {
				return nil, err
			}
			dc := c.(*dlockClient)
			sl := dc.l
			if err := sl.Supports(lock.Permits); err != nil {
				c.Close()
				return nil, err
			}
			return &permitClient{dlockClient: dc, sl: sl}, nil
		}
		ls = append(ls, lk, sem)
	}
	return ls
}

type permitClient struct {
	*dlockClient
	sl *lock.Locker
}

func (c *permitClient) Lock(ctx context.Context, key string) (held, error) {
	lease, err := c.sl.Acquire(ctx, key, semLimit)
	if err != nil {
		return nil, err
	}
	return lease, nil
}

func runSemaphore(ctx context.Context, cfg *config, t *table) error {
	n := 32
	if len(cfg.hotContenders) > 0 {
		n = cfg.hotContenders[len(cfg.hotContenders)-1]
	}
	scen := fmt.Sprintf(scenSemaphore, semLimit, n)
	for _, backend := range cfg.backends() {
		libs := semaphoreLibs(cfg, backend)
		if len(libs) == 0 {
			continue
		}
		if err := baselineThroughput(ctx, cfg, t, scen, backend, n); err != nil {
			return err
		}
		results := make([][]*contention, len(libs))
		for round := range cfg.rounds {
			for i, l := range libs {
				key := cfg.key("semaphore", l.name, fmt.Sprint(round))
				limit := 1
				if i%2 == 1 { // semaphoreLibs: lock, then permits
					limit = semLimit
				}
				res, err := contend(ctx, l, cfg.addr[backend], n, limit, cfg.hotDur/time.Duration(cfg.rounds), func(int) string { return key })
				if err != nil {
					return fmt.Errorf("%s %s: %w", scen, l.name, err)
				}
				results[i] = append(results[i], res)
			}
		}
		for i, l := range libs {
			t.add(merge(results[i]).row(scen, l, true))
		}
	}
	return nil
}
