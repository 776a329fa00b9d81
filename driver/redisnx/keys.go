package redisnx

import (
	"encoding/hex"
	"strings"

	"github.com/google/uuid"
)

// The Redis names of a user key K, with prefix P (DefaultPrefix unless
// Options.Prefix says otherwise):
//
//	P{K}                lock key: the owner token while held, with PX
//	P{K}:fence          fencing counter
//	P{K}:rel            release channel (pub/sub)
//	Pinbox:ID           a Locker's inbox channel, for hand-overs (ID: 32 hex)
//	P{K}:void:OWNER     tombstone of an attempt abandoned after a lost reply
//	P{K}:q              queue of blocking Lock calls (sorted set)
//	P{K}:w              their entries (hash), see prelude.lua
//
// The braces make K the Redis Cluster hash tag, so that a lock key, its
// counter and its tombstones share a slot and one script can touch them all.
//
// No two user keys share a name, and no name of one key equals a name of
// another kind: P{K} is injective in K (P is fixed and K is delimited by the
// braces); lock keys end in '}', counters in ":fence", tombstones in 32 hex
// digits, queues in ":q" and ":w", so the kinds cannot meet; channels live
// in their own namespace.
//
// Redis hashes a key whose hash tag is empty ("{}") as a whole, which would
// put P{}x} and P{}x}:fence in different slots. A key that starts with '}'
// is therefore carried as "\xff" followed by the key: 0xff never occurs in
// UTF-8, so this cannot collide with any other valid key, and the tag "\xff"
// is never empty.
const (
	counterSuffix = ":fence"
	channelSuffix = ":rel"
	voidInfix     = ":void:"
	queueSuffix   = ":q"
	entriesSuffix = ":w"
	// inboxInfix names a hub's inbox channel: P + "inbox:" + 32 hex digits.
	inboxInfix = "inbox:"
)

// newInboxID returns 32 random hex digits.
func newInboxID() string {
	u := uuid.New()
	return hex.EncodeToString(u[:])
}

// names are the Redis keys of one lock that the granting scripts take, in
// their KEYS order: lock key, counter, tombstone of the attempt, queue,
// queue entries.
func names(prefix, key, owner string) []string {
	lk := lockKey(prefix, key)
	return []string{lk, lk + counterSuffix, lk + voidInfix + owner, lk + queueSuffix, lk + entriesSuffix}
}

// lockKey returns the Redis key of the lock on key.
func lockKey(prefix, key string) string {
	var b strings.Builder
	b.Grow(len(prefix) + len(key) + 3)
	b.WriteString(prefix)
	b.WriteByte('{')
	if strings.HasPrefix(key, "}") {
		b.WriteByte(0xff)
	}
	b.WriteString(key)
	b.WriteByte('}')
	return b.String()
}

// slot returns the Redis Cluster hash slot of a Redis key: CRC16 (XMODEM) of
// its hash tag, or of the whole key when it has none, modulo 16384.
func slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}
