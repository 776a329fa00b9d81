package redisnx

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/redis/go-redis/v9"
)

// TestAudit43SetBadInput: AcquireSet refuses, with ErrInvalid and no
// panic, before any I/O, a set that is empty, holds a nil lease, or names
// a key twice (lock passes none of these; another caller of the driver
// might). The script granted both leases of a key named twice, the key
// holding the second lease's owner; a nil lease and an empty set panicked.
func TestAudit43SetBadInput(t *testing.T) {
	c := sharedClient(t, nil)
	core, _ := redisx.NewCore("redisnx", c, nil, false)
	d := newDriver(core)
	defer d.Close()
	ctx := tctx(t, 10*time.Second)
	k := testKey(t)
	lease := func(key string) *driver.Lease {
		return &driver.Lease{Key: key, Owner: newOwner43(), Mode: driver.Exclusive, TTL: 5 * time.Second}
	}
	for name, ls := range map[string][]*driver.Lease{
		"empty":     nil,
		"nil":       {lease(k + "/a"), nil},
		"duplicate": {lease(k + "/a"), lease(k + "/b"), lease(k + "/a")},
	} {
		t.Run(name, func(t *testing.T) {
			var err error
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("AcquireSet panicked: %v", r)
					}
				}()
				err = d.AcquireSet(ctx, ls)
			}()
			if !errors.Is(err, driver.ErrInvalid) {
				t.Errorf("AcquireSet: %v, want ErrInvalid", err)
			}
			for _, key := range []string{k + "/a", k + "/b"} {
				if v, err := c.Get(ctx, lockKey(d.Prefix, key)).Result(); err != redis.Nil {
					t.Errorf("lock key of %q after a refused set: %q, %v; want none", key, v, err)
				}
			}
		})
	}
}

func newOwner43() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}
