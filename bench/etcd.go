package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/driver/etcd"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

// etcd: dlock's driver against go.etcd.io/etcd/client/v3/concurrency's
// Mutex, the lock etcd ships, on the same client library. The baseline
// is two KV Gets (linearizable reads: each goes through the leader's
// read index, as a Txn's compare does).

func dialEtcd(ctx context.Context, addr string) (*clientv3.Client, error) {
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("etcd %s: %w", addr, err)
	}
	if _, err := c.Get(ctx, "bench-probe"); err != nil {
		c.Close()
		return nil, fmt.Errorf("etcd %s: %w", addr, err)
	}
	return c, nil
}

func openDlockEtcd(ctx context.Context, addr string) (client, error) {
	c, err := dialEtcd(ctx, addr)
	if err != nil {
		return nil, err
	}
	return &dlockClient{l: etcd.New(c, nil), close: c.Close}, nil
}

// etcdMutexClient stands for one process using concurrency.Mutex as its
// documentation shows: one Session (one lease, kept alive, default TTL
// 60s) per process, a NewMutex per Lock.
type etcdMutexClient struct {
	c *clientv3.Client
	s *concurrency.Session
}

func openEtcdMutex(ctx context.Context, addr string) (client, error) {
	c, err := dialEtcd(ctx, addr)
	if err != nil {
		return nil, err
	}
	s, err := concurrency.NewSession(c)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("etcd session: %w", err)
	}
	return &etcdMutexClient{c: c, s: s}, nil
}

func (m *etcdMutexClient) Lock(ctx context.Context, key string) (held, error) {
	mu := concurrency.NewMutex(m.s, "/bench-mutex/"+key)
	if err := mu.Lock(ctx); err != nil {
		return nil, err
	}
	return etcdMutexHeld{mu}, nil
}

func (m *etcdMutexClient) Close() error {
	return errors.Join(m.s.Close(), m.c.Close())
}

type etcdMutexHeld struct{ mu *concurrency.Mutex }

func (h etcdMutexHeld) Unlock(ctx context.Context) error { return h.mu.Unlock(ctx) }

type etcdProbe struct{ c *clientv3.Client }

func (p etcdProbe) roundTrip(ctx context.Context) error {
	_, err := p.c.Get(ctx, "bench-probe")
	return err
}
func (p etcdProbe) Close() error { return p.c.Close() }

// etcdVersion asks the member for its version.
func etcdVersion(ctx context.Context, addr string) string {
	c, err := dialEtcd(ctx, addr)
	if err != nil {
		return "?"
	}
	defer c.Close()
	st, err := c.Status(ctx, addr)
	if err != nil {
		return "?"
	}
	return st.Version
}
