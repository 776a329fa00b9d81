package redisx

import (
	"fmt"

	"github.com/dlock-go/dlock/driver"
	"github.com/redis/go-redis/v9"
)

// OneStep checks that a script or transaction over names can run on
// client in one step: always on one server (a *redis.Client, Sentinel's
// included); on a Cluster when every name is in one hash slot; never
// over a Ring, which may place them on different shards. Otherwise it
// returns an error wrapping driver.ErrNotAtomic.
func OneStep(client redis.UniversalClient, names []string) error {
	switch client.(type) {
	case *redis.Client:
		return nil
	case *redis.ClusterClient:
		for _, n := range names[1:] {
			if Slot(n) != Slot(names[0]) {
				return fmt.Errorf("%w: the keys are in different Redis Cluster slots", driver.ErrNotAtomic)
			}
		}
		return nil
	}
	return fmt.Errorf("%w: over a %T, keys may be on different servers", driver.ErrNotAtomic, client)
}
