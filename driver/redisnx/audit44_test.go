package redisnx

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// gate holds the first script a client runs once armed, until opened.
type gate struct {
	armed   atomic.Bool
	entered chan struct{}
	open    chan struct{}
}

func (g *gate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isScript(cmd) && g.armed.CompareAndSwap(true, false) {
			err := next(ctx, cmd)
			close(g.entered)
			<-g.open // the reply, held
			return err
		}
		return next(ctx, cmd)
	}
}

func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestAudit44JoinAfterConfirmation attacks the release that publishes only
// to listeners (bf1e191): a queued waiter's Join makes a plain attempt
// before it registers (its key's channel not confirmed yet), and another
// registration of its Locker confirms the channel and the inbox during
// that attempt's round trip. The waiter is then registered on confirmed
// subscriptions, so no confirmation wakes it, and it is not queued yet:
// it waits for its hint (up to redisx.ConfirmWait). The holder's
// uncontended release finds no queue and no listener mark and publishes
// nothing (it used to publish "", which woke it). The waiter must still
// be woken by, or granted before, that release.
func TestAudit44JoinAfterConfirmation(t *testing.T) {
	c := sharedClient(t, nil)
	g := &gate{entered: make(chan struct{}), open: make(chan struct{})}
	addHook(c, g)
	d := testDriver(c)
	t.Cleanup(func() { d.Close() })
	holder := newTestLocker(t, sharedClient(t, nil), nil)
	ctx := tctx(t, 20*time.Second)
	key := testKey(t)
	lk := lockKey(DefaultPrefix, key)
	held, err := holder.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	l := &driver.Lease{Key: key, Owner: fmt.Sprintf("%032x", time.Now().UnixNano()), Mode: driver.Exclusive, TTL: 10 * time.Second}
	wake := make(chan struct{}, 1)
	joined := make(chan error, 1)
	g.armed.Store(true)
	go func() { joined <- d.Join(ctx, l, wake) }()
	<-g.entered // the plain attempt, answered: held
	other, err := d.Notify.Queue(lk, fmt.Sprintf("%032x", 1), make(chan struct{}, 1))
	if err != nil {
		t.Fatal(err)
	}
	for !other.Ready() {
		time.Sleep(time.Millisecond)
	}
	close(g.open)
	err = <-joined
	other.Stop()
	t.Cleanup(func() { d.Leave(context.Background(), l) })
	var heldErr *driver.HeldError
	if err == nil {
		t.Log("granted at the join")
		return
	}
	if !errors.As(err, &heldErr) {
		t.Fatal(err)
	}
	select { // a confirmation's wake, if any, is not the release's
	case <-wake:
	default:
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wake:
	case <-time.After(time.Second):
		t.Fatal("the release did not wake the waiter registered after its subscriptions were confirmed")
	}
	if err := d.Check(ctx, l); err != nil {
		t.Fatalf("the woken waiter's step: %v", err)
	}
	d.Release(ctx, l)
}

// TestAudit44ClusterListenerWoken attacks the listener mark on a Redis
// Cluster: the waiter (a retry strategy whose backoff is a minute) is
// subscribed through one node and its mark lives on the key's slot's
// node; the holder's uncontended release must see the mark there and
// publish, and the Cluster must carry the message to the waiter's node:
// it is granted well before its next retry.
func TestAudit44ClusterListenerWoken(t *testing.T) {
	admin := sharedCluster(t)
	holder := newTestLocker(t, sharedCluster(t), nil)
	waiter := newTestLocker(t, sharedCluster(t), nil)
	ctx := tctx(t, 30*time.Second)
	for i := range 3 { // keys on different slots
		key := fmt.Sprintf("%s/%d", testKey(t), i)
		lk := lockKey(DefaultPrefix, key)
		held, err := holder.TryLock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			w, err := waiter.Lock(ctx, key, lock.WithRetry(lock.LinearBackoff(time.Minute)))
			if err == nil {
				err = w.Unlock(ctx)
			}
			got <- err
		}()
		if !eventually(5*time.Second, func() bool { return admin.Exists(ctx, lk+redisx.ListenSuffix).Val() == 1 }) {
			t.Fatal("the waiter wrote no listener mark")
		}
		time.Sleep(50 * time.Millisecond) // its attempt after the mark
		if err := held.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-got:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("key %d: the release did not wake the waiter on the Cluster", i)
		}
	}
}
