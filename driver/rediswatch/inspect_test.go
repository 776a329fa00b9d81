package rediswatch

import (
	"context"
	"encoding/hex"
	"slices"

	"github.com/redis/go-redis/v9"
)

// Dump lists every Redis name of key (found with SCAN on the node of its
// slot: the lock key, counter, queue, entries, grant records, readers,
// holds, permits, tombstones) with its serialized value (DUMP, which
// leaves out the expiry).
func (h *harness) Dump(ctx context.Context, key string) ([]string, error) {
	lk := names.LockKey(key)
	node := h.admin
	if c, ok := h.admin.(*redis.ClusterClient); ok {
		n, err := c.MasterForKey(ctx, lk)
		if err != nil {
			return nil, err
		}
		node = n
	}
	var found []string
	iter := node.Scan(ctx, 0, globEscape(lk)+"*", 1000).Iterator()
	for iter.Next(ctx) {
		found = append(found, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return nil, err
	}
	slices.Sort(found)
	out := []string{}
	for _, k := range found {
		v, err := node.Dump(ctx, k).Result()
		if err == redis.Nil {
			continue // expired since the scan
		}
		if err != nil {
			return nil, err
		}
		out = append(out, k+" "+hex.EncodeToString([]byte(v)))
	}
	return out, nil
}
