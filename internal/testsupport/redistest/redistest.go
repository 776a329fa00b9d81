// Package redistest has what the Redis drivers' tests share to look at a
// server behind the drivers' back: the node that keeps a lock's names, the
// names under a prefix, and their serialized values. It is for tests only.
package redistest

import (
	"context"
	"encoding/hex"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"
)

// GlobEscape quotes the characters special to Redis's glob patterns.
func GlobEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(`\*?[]^-`, s[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Node returns the client of the node that keeps name: rdb itself, or the
// Cluster master of name's slot.
func Node(ctx context.Context, rdb redis.UniversalClient, name string) (redis.UniversalClient, error) {
	if c, ok := rdb.(*redis.ClusterClient); ok {
		return c.MasterForKey(ctx, name)
	}
	return rdb, nil
}

// Scan returns the names that start with prefix on node (SCAN).
func Scan(ctx context.Context, node redis.UniversalClient, prefix string) ([]string, error) {
	var found []string
	iter := node.Scan(ctx, 0, GlobEscape(prefix)+"*", 1000).Iterator()
	for iter.Next(ctx) {
		found = append(found, iter.Val())
	}
	return found, iter.Err()
}

// Dump lists every name that starts with lk on the node of its slot (a
// lock key and all the names derived from it, which share its hash tag),
// sorted, each with its serialized value (DUMP, which leaves out the
// expiry): two Dumps differ when anything of the lock was written.
func Dump(ctx context.Context, rdb redis.UniversalClient, lk string) ([]string, error) {
	node, err := Node(ctx, rdb, lk)
	if err != nil {
		return nil, err
	}
	found, err := Scan(ctx, node, lk)
	if err != nil {
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
