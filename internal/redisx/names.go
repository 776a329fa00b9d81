package redisx

import (
	"encoding/hex"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// NilClient reports whether client is nil, or a nil pointer of one of
// go-redis's client types in the interface (var c *redis.Client; New(c,
// nil)), which would otherwise panic at the first call.
func NilClient(client redis.UniversalClient) bool {
	switch c := client.(type) {
	case nil:
		return true
	case *redis.Client:
		return c == nil
	case *redis.ClusterClient:
		return c == nil
	case *redis.Ring:
		return c == nil
	}
	return false
}

// The Redis names both drivers share, for a user key K and prefix P
// (each driver's Options.Prefix, "dlock:" by default, without braces):
//
//	P{K}               the lock: the holder's owner token, with a PX expiry
//	P{K}:fence         the fencing counter
//	P{K}:rel           the release channel (pub/sub)
//	P{K}:r             the readers of a shared grant (P{K} then holds
//	                   Readers): a sorted set of owners scored by when each
//	                   share expires, in ms on the server's clock
//	P{K}:h             the holds of a named owner's grant (lock.WithOwner):
//	                   a hash of the holds' owner tokens (value "1") and
//	                   "t", the grant's fencing token; it expires with P{K}
//	P{K}:s             the permits of a semaphore (P{K} then holds
//	                   PermitsValue(N), "S" and the limit N in decimal): a
//	                   sorted set of owners scored by when each permit
//	                   expires, in ms on the server's clock; P{K}'s PX is
//	                   at least the longest permit's, so that every other
//	                   grant (and a plain SET NX lock) finds the key held
//	P{K}:n             the notes of grants (driver.Lease.Note): a hash of
//	                   owner token -> note (a named owner's grant: its
//	                   first hold's token, P{K}'s value); it lives at
//	                   least as long as each noted grant in it, and a
//	                   release of a noted grant deletes its field; fields
//	                   of owners that hold nothing are ignored. Each
//	                   driver describes where it writes it
//	P{K}:void:OWNER    a tombstone, after a grant whose reply was lost
//	P{K}:l             a listener mark, "1" with a PX of ListenLife: a
//	                   Locker's waiter or observer subscribed to P{K}:rel
//	                   (Core.Subscribe writes it, and renews it while
//	                   subscribed); redisnx's uncontended release publishes
//	                   on P{K}:rel only while it, P{K}:q or P{K}:wq exists
//	P{K}:wq            rediswatch's queue (the other queue names are each
//	                   driver's own)
//	Pinbox:ID          a Locker's inbox channel (ID: 32 hex digits)
//
// Each driver adds the names of its own queue. The braces make K the Redis
// Cluster hash tag, so that every name of one lock shares a slot and one
// script or transaction can touch them all. P{K} is injective in K (P has
// no braces and K is delimited by them). Redis hashes a name whose hash tag
// is empty ("{}") as a whole, which would put P{}x} and P{}x}:fence in
// different slots: a key that starts with "}" is therefore carried as
// "\xff" followed by the key (0xff never occurs in UTF-8, so this collides
// with no other valid key, and the tag is never empty).
const (
	CounterSuffix = ":fence"
	ChannelSuffix = ":rel"
	ReadersSuffix = ":r"
	PermitsSuffix = ":s"
	HoldsSuffix   = ":h"
	NotesSuffix   = ":n"
	VoidInfix     = ":void:"
	ListenSuffix  = ":l"
	// WatchQueueSuffix names rediswatch's queue, which redisnx's release
	// also looks for (a waiter there hears releases on P{K}:rel).
	WatchQueueSuffix = ":wq"
	InboxInfix       = "inbox:"
)

// Readers is the value of a lock key while readers hold shares (never an
// owner token: those are lowercase hex).
const Readers = "R"

// PermitsValue is the value of a lock key while permits of a semaphore of
// limit permits are held: "S" and the limit in decimal (never an owner
// token, nor Readers).
func PermitsValue(limit int) string { return "S" + strconv.Itoa(limit) }

// LockKey returns the Redis key of the lock on key.
func LockKey(prefix, key string) string {
	var b strings.Builder
	b.Grow(len(prefix) + len(key) + 3)
	WriteLockKey(&b, prefix, key)
	return b.String()
}

// WriteLockKey writes the Redis key of the lock on key to b.
func WriteLockKey(b *strings.Builder, prefix, key string) {
	b.WriteString(prefix)
	b.WriteByte('{')
	if strings.HasPrefix(key, "}") {
		b.WriteByte(0xff)
	}
	b.WriteString(key)
	b.WriteByte('}')
}

// NewInboxID returns 32 random hex digits, a Locker's inbox ID.
func NewInboxID() string {
	u := uuid.New()
	return hex.EncodeToString(u[:])
}

// Slot returns the Redis Cluster hash slot of a Redis name: CRC16 (XMODEM)
// of its hash tag (the part between the first "{" and the next "}", when
// not empty), or of the whole name, modulo 16384.
func Slot(name string) int {
	if i := strings.IndexByte(name, '{'); i >= 0 {
		if j := strings.IndexByte(name[i+1:], '}'); j > 0 {
			name = name[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(name); k++ {
		crc ^= uint16(name[k]) << 8
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

// The queues of both drivers: a waiter renews its entry every
// driver.Heartbeat (lock calls Check that often at least); an entry not
// renewed for EntryLife is dead (its process crashed or is cut off) and is
// skipped.
const (
	EntryLife   = 3 * driver.Heartbeat
	EntryLifeMS = int64(EntryLife / time.Millisecond)
)
