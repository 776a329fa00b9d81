package memcached

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"unsafe"

	"github.com/dlock-go/dlock/internal/errtext"
)

// Key mapping. A user key K becomes two memcached keys:
//
//	lock:     PREFIX "l=" K                   K as it is, when it fits and is legal
//	          PREFIX "l#" hex(sha256(K))      otherwise
//	counter:  PREFIX "c" (the same "=K" or "#hex") "." SUFFIX
//
// The marker after the prefix ('l' or 'c') keeps lock keys and counter keys
// apart; the next one ('=' or '#') keeps keys used as they are apart from
// hashed ones, so a user key that looks like a hash cannot meet the hash of
// another key. SUFFIX is 8 bytes in '@'..'_' chosen so that the counter key
// has the same CRC-32 as the lock key (see forge): gomemcache's ServerList
// picks a server by crc32(key) mod n, so a lock and its counter land on the
// same server for every n.

const (
	// maxKeyLen is memcached's limit on a key's length in bytes.
	maxKeyLen = 250
	// maxPrefixLen bounds Options.Prefix so that a hashed key always fits:
	// prefix + "c#" + 64 hex digits + "." + 8 bytes.
	maxPrefixLen = 64
	// suffixLen is the counter key's "." plus its 8 forged bytes.
	suffixLen = 1 + forgeLen
	forgeLen  = 8
)

// keys are the memcached keys of one user key.
type keys struct {
	lock    string // the grant: value = owner, with the lease's expiry
	counter string // the fencing counter, expiring counterLife after it was made
}

// mapKey maps a user key to its memcached keys. It is deterministic and
// injective: distinct user keys never share a memcached key. Both keys are
// cut from one string, built in one allocation: this runs on every grant.
func mapKey(prefix, key string) keys {
	var hashed [2 * sha256.Size]byte
	mark, bodyLen := byte('='), len(key)
	hash := !legal(key) || len(prefix)+len("c=")+len(key)+suffixLen > maxKeyLen
	if hash {
		sum := sha256.Sum256([]byte(key))
		hex.Encode(hashed[:], sum[:])
		mark, bodyLen = '#', len(hashed)
	}
	lockLen := len(prefix) + len("l=") + bodyLen
	b := make([]byte, 0, 2*lockLen+suffixLen)
	for _, marker := range [...]byte{'l', 'c'} {
		b = append(b, prefix...)
		b = append(b, marker, mark)
		if hash {
			b = append(b, hashed[:]...)
		} else {
			b = append(b, key...)
		}
	}
	b = append(b, '.')
	suffix := forge(b[lockLen:], crc32.ChecksumIEEE(b[:lockLen]))
	b = append(b, suffix[:]...)
	// b is not written after this: the string may share its bytes.
	all := unsafe.String(unsafe.SliceData(b), len(b))
	return keys{lock: all[:lockLen], counter: all[lockLen:]}
}

// legal reports whether memcached's text protocol can carry s in a key: no
// space, control byte or DEL.
func legal(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] == 0x7f {
			return false
		}
	}
	return true
}

// checkPrefix validates Options.Prefix.
func checkPrefix(p string) error {
	switch {
	case len(p) > maxPrefixLen:
		return fmt.Errorf("key prefix of %d bytes is longer than %d", len(p), maxPrefixLen)
	case !legal(p):
		return fmt.Errorf("key prefix %s contains a space or control byte, which memcached keys cannot carry", errtext.Quote(p))
	}
	return nil
}

// The forged suffix. CRC-32 is affine over GF(2) for messages of one
// length: flipping a bit of the last 8 bytes flips a fixed set of bits of
// the checksum, whatever precedes them. Each suffix byte is '@' (0x40) plus
// 5 free low bits, so every choice is a legal key byte; 8 bytes give 40 free
// bits, of which 32 independent ones reach every checksum. forgeBasis holds,
// for each checksum bit, a combination of free bits (mask) whose flips
// change the checksum by vec, whose highest set bit is that bit.

type basisRow struct {
	vec  uint32 // change of the checksum
	mask uint64 // free bits flipped: bit 5*j+b is bit b of suffix byte j
}

var forgeBasis, forgeRank = func() (basis [32]basisRow, rank int) {
	var zero [forgeLen]byte
	z := crc32.ChecksumIEEE(zero[:])
	for i := range 5 * forgeLen {
		var d [forgeLen]byte
		d[i/5] = 1 << (i % 5)
		r := basisRow{vec: crc32.ChecksumIEEE(d[:]) ^ z, mask: 1 << i}
		for bit := 31; bit >= 0 && r.vec != 0; bit-- {
			if r.vec>>bit&1 == 0 {
				continue
			}
			if basis[bit].vec == 0 {
				basis[bit] = r
				rank++
				break
			}
			r.vec ^= basis[bit].vec
			r.mask ^= basis[bit].mask
		}
	}
	return basis, rank
}()

// unforged is the suffix with no free bit set (a variable, which crc32
// reads without a copy to the heap).
var unforged = [forgeLen]byte{'@', '@', '@', '@', '@', '@', '@', '@'}

// forge returns the 8 bytes that, appended to base, give a string whose
// CRC-32 (IEEE) is target. If that were impossible (it is not: a test checks
// the rank) it returns "@@@@@@@@", which only costs the co-location.
func forge(base []byte, target uint32) [forgeLen]byte {
	s := unforged
	diff := crc32.Update(crc32.ChecksumIEEE(base), crc32.IEEETable, unforged[:]) ^ target
	var mask uint64
	for bit := 31; bit >= 0; bit-- {
		if diff>>bit&1 != 0 {
			diff ^= forgeBasis[bit].vec
			mask ^= forgeBasis[bit].mask
		}
	}
	if diff == 0 {
		for j := range s {
			s[j] |= byte(mask >> (5 * j) & 31)
		}
	}
	return s
}
