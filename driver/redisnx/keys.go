package redisnx

import "github.com/dlock-go/dlock/internal/redisx"

// The Redis names of a user key K, with prefix P: those both Redis drivers
// share (internal/redisx), and this driver's queue, P{K}:q (a sorted set of
// owners) and P{K}:w (their entries, a hash: see prelude.lua).
// docs/design.md lists them all, and why they cannot meet.
const (
	counterSuffix = redisx.CounterSuffix
	channelSuffix = redisx.ChannelSuffix
	queueSuffix   = ":q"
	entriesSuffix = ":w"
)

// names are the Redis keys of one lock that the granting scripts take, in
// their KEYS order: lock key, counter, tombstone of the attempt, queue,
// queue entries.
func names(prefix, key, owner string) []string {
	lk := lockKey(prefix, key)
	return []string{lk, lk + counterSuffix, lk + redisx.VoidInfix + owner, lk + queueSuffix, lk + entriesSuffix}
}

// lockKey returns the Redis key of the lock on key.
func lockKey(prefix, key string) string { return redisx.LockKey(prefix, key) }
