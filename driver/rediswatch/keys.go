package rediswatch

import (
	"strings"

	"github.com/dlock-go/dlock/internal/redisx"
)

// The Redis names of a user key K, with prefix P: those both Redis drivers
// share (internal/redisx), and this driver's queue (see queue.go), apart
// from redisnx's. docs/wire/redis.md lists them all, and why they cannot meet.
const (
	counterSuffix = redisx.CounterSuffix
	channelSuffix = redisx.ChannelSuffix
	voidInfix     = redisx.VoidInfix
	readersSuffix = redisx.ReadersSuffix
	queueSuffix   = redisx.WatchQueueSuffix
	entryInfix    = ":we:"
	grantInfix    = ":wg:"
)

func counterKey(lk string) string       { return lk + counterSuffix }
func channel(lk string) string          { return lk + channelSuffix }
func tombstone(lk, owner string) string { return lk + voidInfix + owner }
func waitQueue(lk string) string        { return lk + queueSuffix }
func readersKey(lk string) string       { return lk + readersSuffix }
func waitEntry(lk, owner string) string { return lk + entryInfix + owner }

// grantRecord holds the token of a grant handed over to owner by a release,
// for EntryLife (see release).
func grantRecord(lk, owner string) string { return lk + grantInfix + owner }

// queueElem is a waiter's element in a queue: its owner and, when it has
// one, the inbox channel of its Locker, where releases name it.
func queueElem(owner, inbox string) string {
	if inbox == "" {
		return owner
	}
	return owner + " " + inbox
}

// splitElem splits a queue element into owner and inbox ("" without one).
func splitElem(e string) (owner, inbox string) {
	owner, inbox, _ = strings.Cut(e, " ")
	return owner, inbox
}
