package etcd

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestAudit38CounterAtItsEnd: a key's counter written far ahead (by an
// operator, a user with write rights on the counter, or a tool that
// took the counter for a plain number) up to, or past, the largest
// token. A grant must never take a token at or below the counter:
// tokens never go backwards for a key, and the counter+1 of the grant
// rule must not wrap to 0 (then the token would be the clock's) nor a
// number past 2^64-1 be read as a smaller one. Refusing the grant is
// right; granting below the counter is not.
func TestAudit38CounterAtItsEnd(t *testing.T) {
	e := testserver.SharedEtcd(t)
	prefix := fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())
	l := newTestLocker(t, e.Endpoints(), &Options{Prefix: prefix, Options: lock.Options{TTL: 5 * time.Second}}, &netCut{})
	raw := rawClient(t, e.Endpoints())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	for i, counter := range []string{
		"18446744073709551614", // 2^64-2: one token left, then the end
		"18446744073709551615", // 2^64-1: no token left
		"18446744073709551616", // 2^64: wraps to 0 when read modulo 2^64
		"99999999999999999999", // 10^20-1
	} {
		k := fmt.Sprintf("audit38-counter-end-%d", i)
		if _, err := raw.Put(ctx, prefix+"c/"+escape(k), counter); err != nil {
			t.Fatal(err)
		}
		floor, _ := new(big.Int).SetString(counter, 10)
		for round := range 2 {
			ls, err := l.TryLock(ctx, k)
			if err != nil {
				if errors.Is(err, lock.ErrHeld) {
					t.Fatalf("counter %s, grant %d: %v (the key is free)", counter, round, err)
				}
				t.Logf("counter %s, grant %d refused: %v", counter, round, err)
				break
			}
			tok := new(big.Int).SetUint64(ls.Token())
			if tok.Cmp(floor) <= 0 {
				t.Errorf("counter %s, grant %d: token %d, not above the counter", counter, round, ls.Token())
			}
			floor = tok
			if err := ls.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	// a refused grant leaves nothing (lock's clean-up revokes its lease)
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		r, err := raw.Get(ctx, prefix+"q/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if r.Count == 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("%d entries left 10 s after the refused grants", r.Count)
		}
	}
}
