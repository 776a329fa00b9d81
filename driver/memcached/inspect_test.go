package memcached

import (
	"context"
	"errors"
	"fmt"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/dlock-go/dlock/driver/drivertest"
)

// inspectCaps: the lock item's value tells the holder, and a named owner's
// token; nothing tells an anonymous grant's token, the item's expiry,
// when it was made, or who polls for it.
var inspectCaps = &drivertest.InspectCaps{}

// Dump lists the key's lock item and counter with their values and cas
// ids (gets): any write to an item, a touch included, gives it a new cas
// id.
func (h *harness) Dump(ctx context.Context, key string) ([]string, error) {
	k := mapKey(DefaultPrefix, key)
	out := []string{}
	for _, name := range []string{k.lock, k.counter} {
		it, err := h.raw.Get(name)
		if errors.Is(err, memcache.ErrCacheMiss) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, fmt.Sprintf("%s %q flags=%d cas=%d", name, it.Value, it.Flags, it.CasID))
	}
	return out, nil
}
