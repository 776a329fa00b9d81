package memcached

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"strings"
	"testing"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/dlock-go/dlock/lock"
)

func oddKeys() []string {
	h := sha256.Sum256([]byte("a b"))
	hashLike := "#" + hex.EncodeToString(h[:])
	return []string{
		"a", "a b", "a_b", "new\nline", "tab\t", "nul\x00byte", "del\x7f", "ctl\x01",
		"unicodé ключ 鍵 🔒", "{hashtag}", "*?[]%", "colon:semi;", ".", "..", "UPPER", "upper",
		hashLike, "=" + hashLike, "l#" + hashLike[1:], "c=a", "a.@@@@@@@@",
		strings.Repeat("x", 250-len(DefaultPrefix)-2-suffixLen), // longest key used as it is
		strings.Repeat("x", 250-len(DefaultPrefix)-2-suffixLen+1),
		strings.Repeat("y", 300) + "1", strings.Repeat("y", 300) + "2",
		strings.Repeat("z", lock.MaxKeyLen),
	}
}

func TestMapKeyLegalAndInjective(t *testing.T) {
	for _, prefix := range []string{DefaultPrefix, "p", strings.Repeat("P", maxPrefixLen)} {
		seen := map[string]string{}
		for _, k := range oddKeys() {
			ks := mapKey(prefix, k)
			for _, mk := range []string{ks.lock, ks.counter} {
				if len(mk) > maxKeyLen || !legal(mk) {
					t.Errorf("prefix %q, key %q: memcached key %q is not legal", prefix, k, mk)
				}
				if other, dup := seen[mk]; dup {
					t.Errorf("prefix %q: keys %q and %q share memcached key %q", prefix, other, k, mk)
				}
				seen[mk] = k
			}
			if mapKey(prefix, k) != ks {
				t.Errorf("mapping of %q is not deterministic", k)
			}
		}
	}
}

func TestMapKeyForms(t *testing.T) {
	if got := mapKey("dlock:", "orders/42").lock; got != "dlock:l=orders/42" {
		t.Errorf("ordinary key: lock key %q, want it used as it is", got)
	}
	long := strings.Repeat("x", 250-len(DefaultPrefix)-2-suffixLen)
	if got := mapKey(DefaultPrefix, long).lock; got != DefaultPrefix+"l="+long {
		t.Errorf("longest as-is key was hashed")
	}
	sum := sha256.Sum256([]byte(long + "x"))
	if got, want := mapKey(DefaultPrefix, long+"x").lock, DefaultPrefix+"l#"+hex.EncodeToString(sum[:]); got != want {
		t.Errorf("key one byte too long: lock key %q, want %q", got, want)
	}
	sum = sha256.Sum256([]byte("a b"))
	if got, want := mapKey(DefaultPrefix, "a b").lock, DefaultPrefix+"l#"+hex.EncodeToString(sum[:]); got != want {
		t.Errorf("key with a space: lock key %q, want %q", got, want)
	}
}

// The forged suffix gives the counter key the lock key's CRC-32, so that
// gomemcache's ServerList (crc32 mod n) puts both on one server.
func TestCounterSharesServer(t *testing.T) {
	if forgeRank != 32 {
		t.Fatalf("forge basis has rank %d, want 32", forgeRank)
	}
	for i := range 2000 {
		k := fmt.Sprintf("key/%d", i)
		if i%3 == 0 {
			k = strings.Repeat("k", i%400) + " " + k
		}
		ks := mapKey(DefaultPrefix, k)
		if a, b := crc32.ChecksumIEEE([]byte(ks.lock)), crc32.ChecksumIEEE([]byte(ks.counter)); a != b {
			t.Fatalf("key %q: crc32 of lock key %08x, of counter key %08x", k, a, b)
		}
	}
	for n := 2; n <= 7; n++ {
		var addrs []string
		for i := range n {
			addrs = append(addrs, fmt.Sprintf("127.0.0.1:%d", 20000+i))
		}
		var ss memcache.ServerList
		if err := ss.SetServers(addrs...); err != nil {
			t.Fatal(err)
		}
		used := map[string]bool{}
		for _, k := range oddKeys() {
			ks := mapKey(DefaultPrefix, k)
			a, _ := ss.PickServer(ks.lock)
			b, _ := ss.PickServer(ks.counter)
			if a.String() != b.String() {
				t.Errorf("%d servers, key %q: lock on %v, counter on %v", n, k, a, b)
			}
			used[a.String()] = true
		}
		if len(used) < 2 {
			t.Errorf("%d servers: every key on one server", n)
		}
	}
}

func TestCheckPrefix(t *testing.T) {
	for _, p := range []string{"", "dlock:", "a/b{c}", strings.Repeat("p", maxPrefixLen)} {
		if err := checkPrefix(p); err != nil {
			t.Errorf("checkPrefix(%q): %v", p, err)
		}
	}
	for _, p := range []string{"a b", "a\nb", "\x7f", strings.Repeat("p", maxPrefixLen+1)} {
		if err := checkPrefix(p); err == nil {
			t.Errorf("checkPrefix(%q) accepted it", p)
		}
	}
}

// TestMapKeyNames pins the memcached keys of a few user keys: processes of
// different versions exclude each other only if they map a key alike.
func TestMapKeyNames(t *testing.T) {
	for _, c := range []struct{ prefix, key, lock, counter string }{
		{"dlock:", "orders/42", "dlock:l=orders/42", "dlock:c=orders/42.M@ZA_VB@"},
		{"dlock:", "a b", "dlock:l#c8687a08aa5d6ed2044328fa6a697ab8e96dc34291e8c2034ae8c38e6fcc6d65",
			"dlock:c#c8687a08aa5d6ed2044328fa6a697ab8e96dc34291e8c2034ae8c38e6fcc6d65._REP@IB@"},
		{"dlock:", "unicodé ключ 鍵 🔒", "dlock:l#ed9c630f1e80de0a777220946f82e56830c1c68548594fed23a30cf54405a692",
			"dlock:c#ed9c630f1e80de0a777220946f82e56830c1c68548594fed23a30cf54405a692.CEUOOPC@"},
		{"dlock:", strings.Repeat("x", 233), "dlock:l=" + strings.Repeat("x", 233), "dlock:c=" + strings.Repeat("x", 233) + ".[ZYO_GB@"},
		{"dlock:", strings.Repeat("x", 234), "dlock:l#5e49947899449e853405aa8c52d35998bcc003fd1299e721f6990b38a698ca6c",
			"dlock:c#5e49947899449e853405aa8c52d35998bcc003fd1299e721f6990b38a698ca6c.VUOZKGA@"},
		{"dlock:", "", "dlock:l=", "dlock:c=.W_VK]E@@"},
		{"p", "k", "pl=k", `pc=k.CL^\OXA@`},
	} {
		if got := mapKey(c.prefix, c.key); got.lock != c.lock || got.counter != c.counter {
			t.Errorf("prefix %q, key %q: keys %q, %q; want %q, %q", c.prefix, c.key, got.lock, got.counter, c.lock, c.counter)
		}
	}
}

// TestMapKeyAllocs: mapping a key that is used as it is costs one
// allocation (it runs on every grant).
func TestMapKeyAllocs(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { _ = mapKey(DefaultPrefix, "orders/42") }); n > 1 {
		t.Errorf("mapKey: %v allocations, want 1", n)
	}
}
