package chaos

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// The users EtcdEnableAuth makes: root, the application's (read and
// write under the prefix) and a reader's (read only under the prefix).
const (
	EtcdRoot           = "root"
	EtcdRootPassword   = "root-secret"
	EtcdAppUser        = "dlock"
	EtcdAppPassword    = "dlock-secret"
	EtcdReaderUser     = "nemesis-reader"
	EtcdReaderPassword = "reader-secret"
)

// EtcdEnableAuth turns etcd's authentication on, with root, an
// application user that may read and write the keys under prefix and a
// reader that may only read them (etcd lets any user grant, renew and
// revoke leases, the last only if it may write every key attached).
// Made before auth is on, through an unauthenticated client.
func EtcdEnableAuth(ctx context.Context, addrs []string, prefix string) error {
	c, err := clientv3.New(clientv3.Config{Endpoints: addrs, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer c.Close()
	end := clientv3.GetPrefixRangeEnd(prefix)
	steps := []func() error{
		func() error { _, err := c.UserAdd(ctx, EtcdRoot, EtcdRootPassword); return err },
		func() error { _, err := c.UserGrantRole(ctx, EtcdRoot, "root"); return err },
		func() error { _, err := c.RoleAdd(ctx, "dlock-app"); return err },
		func() error {
			_, err := c.RoleGrantPermission(ctx, "dlock-app", prefix, end, clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := c.UserAdd(ctx, EtcdAppUser, EtcdAppPassword); return err },
		func() error { _, err := c.UserGrantRole(ctx, EtcdAppUser, "dlock-app"); return err },
		func() error { _, err := c.RoleAdd(ctx, "dlock-reader"); return err },
		func() error {
			_, err := c.RoleGrantPermission(ctx, "dlock-reader", prefix, end, clientv3.PermissionType(clientv3.PermRead))
			return err
		},
		func() error { _, err := c.UserAdd(ctx, EtcdReaderUser, EtcdReaderPassword); return err },
		func() error { _, err := c.UserGrantRole(ctx, EtcdReaderUser, "dlock-reader"); return err },
		func() error { _, err := c.AuthEnable(ctx); return err },
	}
	for i, s := range steps {
		if err := s(); err != nil {
			return fmt.Errorf("etcd auth setup, step %d: %w", i+1, err)
		}
	}
	return nil
}

// EtcdClient is a client of addrs as user (none: "").
func EtcdClient(addrs []string, user, password string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: addrs, DialTimeout: 5 * time.Second, Logger: zap.NewNop(), Username: user, Password: password})
}

// EtcdDenied reports whether err is etcd's refusal for lack of rights.
func EtcdDenied(err error) bool {
	return errors.Is(err, rpctypes.ErrPermissionDenied) || err != nil && rpctypes.ErrorDesc(err) == rpctypes.ErrPermissionDenied.Error()
}
