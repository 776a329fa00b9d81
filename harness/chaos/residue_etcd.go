package chaos

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// EtcdResidue lists the keys attached to a lease left in an etcd service
// (driver/etcd's entries: a grant or a waiting place); its counters (a
// decimal value) are on a lease of 7 days and stay that long by design.
func EtcdResidue(ctx context.Context, addrs []string) ([]string, error) {
	// As root if EtcdEnableAuth turned authentication on.
	c, err := EtcdClient(addrs, EtcdRoot, EtcdRootPassword)
	if err != nil {
		c, err = EtcdClient(addrs, "", "")
	}
	if err != nil {
		return nil, err
	}
	defer c.Close()
	resp, err := c.Get(ctx, "", clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("etcd get: %w", err)
	}
	var out []string
	for _, kv := range resp.Kvs {
		if kv.Lease != 0 && !decimal(kv.Value) {
			out = append(out, fmt.Sprintf("%s (lease %x)", kv.Key, kv.Lease))
		}
	}
	return out, nil
}

// decimal reports whether v is a counter's value: digits only.
func decimal(v []byte) bool {
	for _, c := range v {
		if c < '0' || c > '9' {
			return false
		}
	}
	return len(v) > 0
}
