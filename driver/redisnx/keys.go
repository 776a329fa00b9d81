package redisnx

import (
	"strings"

	"github.com/dlock-go/dlock/internal/redisx"
)

// The Redis names of a user key K, with prefix P: those both Redis drivers
// share (internal/redisx), this driver's queue, P{K}:q (a sorted set of
// owners) and P{K}:w (their entries, a hash), its readers, P{K}:r, and
// the permits of a semaphore, P{K}:s (sorted sets: see prelude.lua).
// docs/wire/redis.md lists them all, and why they cannot meet.
const (
	counterSuffix = redisx.CounterSuffix
	channelSuffix = redisx.ChannelSuffix
	queueSuffix   = ":q"
	entriesSuffix = ":w"
	readersSuffix = redisx.ReadersSuffix
	permitsSuffix = redisx.PermitsSuffix
)

// keyNames are the Redis names of one attempt: the keys the granting
// scripts take, in their KEYS order (lock key, counter, tombstone of the
// attempt, queue, queue entries, readers), and the key's release channel.
// They are slices of one string, made in one allocation.
type keyNames [7]string

func names(prefix, key, owner string) *keyNames {
	var b strings.Builder
	b.Grow(6*(len(prefix)+len(key)+3) + len(counterSuffix) + len(redisx.VoidInfix) + len(owner) + len(queueSuffix) + len(entriesSuffix) + len(readersSuffix) + len(channelSuffix))
	var ends [7]int
	for i, parts := range [7][2]string{{"", ""}, {counterSuffix, ""}, {redisx.VoidInfix, owner}, {queueSuffix, ""}, {entriesSuffix, ""}, {readersSuffix, ""}, {channelSuffix, ""}} {
		if i != 1 { // the counter follows the lock key written for the lock
			redisx.WriteLockKey(&b, prefix, key)
		}
		b.WriteString(parts[0])
		b.WriteString(parts[1])
		ends[i] = b.Len()
	}
	all := b.String()
	n := &keyNames{all[:ends[0]], all[:ends[1]]}
	for i := 2; i < 7; i++ {
		n[i] = all[ends[i-1]:ends[i]]
	}
	return n
}

// lockKey returns the Redis key of the lock on key.
func lockKey(prefix, key string) string { return redisx.LockKey(prefix, key) }
