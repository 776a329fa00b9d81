package rediswatch

import "strings"

// The Redis names of a user key K, with prefix P (DefaultPrefix unless
// Options.Prefix says otherwise), shared with redisnx:
//
//	P{K}                lock key: the owner token while held, with PX
//	P{K}:fence          fencing counter
//	P{K}:rel            release channel (pub/sub)
//	P{K}:void:OWNER     tombstone of a grant abandoned after a lost reply
//	P{K}:wq             queue of blocking Lock calls (list of "OWNER INBOX")
//	Pinbox:ID           a Locker's inbox channel (ID: 32 hex digits)
//	P{K}:we:OWNER       a queued owner's entry, alive while it waits
//
// The braces make K the Redis Cluster hash tag, so that a lock key, its
// counter and its tombstones share a slot and one transaction can watch and
// write them all. P{K} is injective in K (P has no braces, K is delimited by
// them), and the kinds cannot meet: lock keys end in "}", counters in
// ":fence", queues in ":wq", tombstones and entries in ":void:" and ":we:"
// followed by 32 hex digits; channels have their own namespace. (redisnx's
// queue is "P{K}:q" and "P{K}:w": the two drivers queue apart.)
//
// Redis hashes a name whose hash tag is empty ("{}") as a whole, which
// would put P{}x} and P{}x}:fence in different slots. A key that starts
// with "}" is therefore carried as "\xff" followed by the key: 0xff never
// occurs in UTF-8, so this collides with no other valid key, and the tag is
// never empty.
const (
	counterSuffix = ":fence"
	channelSuffix = ":rel"
	voidInfix     = ":void:"
	queueSuffix   = ":wq"
	// inboxInfix names a Locker's inbox channel: P + "inbox:" + 32 hex
	// digits (see notify.go).
	inboxInfix = "inbox:"
	entryInfix = ":we:"
)

func (d *watchDriver) lockKey(key string) string {
	var b strings.Builder
	b.Grow(len(d.prefix) + len(key) + 3)
	b.WriteString(d.prefix)
	b.WriteByte('{')
	if strings.HasPrefix(key, "}") {
		b.WriteByte(0xff)
	}
	b.WriteString(key)
	b.WriteByte('}')
	return b.String()
}

func counterKey(lk string) string       { return lk + counterSuffix }
func channel(lk string) string          { return lk + channelSuffix }
func tombstone(lk, owner string) string { return lk + voidInfix + owner }
func waitQueue(lk string) string        { return lk + queueSuffix }
func waitEntry(lk, owner string) string { return lk + entryInfix + owner }

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
