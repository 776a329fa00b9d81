package redisnx

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redisx"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// RefreshBatch extends every lease still held, reports the others, and
// sends one script per group of keys one script may touch (everything on a
// single server; one slot on a Cluster), in one pipeline. With the script
// cache flushed it falls back to EVAL once.
func TestRefreshBatch(t *testing.T) {
	topologies(t, func(t *testing.T, c redis.UniversalClient) {
		for _, flushed := range []bool{false, true} {
			t.Run(fmt.Sprintf("flushed=%v", flushed), func(t *testing.T) {
				testRefreshBatch(t, c, flushed)
			})
		}
	})
}

func testRefreshBatch(t *testing.T, c redis.UniversalClient, flushed bool) {
	var n counter
	dc := cloneClient(t, c, "")
	addHook(dc, &n)
	d := testDriver(dc)
	defer d.Close()
	ctx := tctx(t, 30*time.Second)
	base := testKey(t)
	var ls []*driver.Lease
	slots := map[int]bool{}
	for i := range 250 {
		l := newLease(fmt.Sprintf("%s/%d", base, i), fmt.Sprintf("%032x", i+1), 5*time.Second)
		if err := d.Acquire(ctx, l); err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		ls = append(ls, l)
		slots[redisx.Slot(lockKey(DefaultPrefix, l.Key))] = true
	}
	defer func() {
		for _, l := range ls {
			d.Release(context.Background(), l)
		}
	}()
	stolen, deleted := ls[7], ls[100]
	c.Set(ctx, lockKey(DefaultPrefix, stolen.Key), "intruder", time.Minute)
	c.Del(ctx, lockKey(DefaultPrefix, deleted.Key))
	if flushed {
		flushScripts(t, c)
	} else {
		loadScripts(t, c)
	}

	before, pipes := n.cmds.Load(), n.pipelines.Load()
	v, errs := d.RefreshBatch(ctx, ls, 30*time.Second)
	sent, pipelines := n.cmds.Load()-before, n.pipelines.Load()-pipes
	if v != 30*time.Second || len(errs) != len(ls) {
		t.Fatalf("RefreshBatch: validity %v, %d results for %d leases", v, len(errs), len(ls))
	}
	for i, err := range errs {
		l := ls[i]
		switch {
		case l == stolen || l == deleted:
			if !errors.Is(err, driver.ErrNotHeld) {
				t.Errorf("lease %d (gone): %v, want ErrNotHeld", i, err)
			}
		case err != nil:
			t.Errorf("lease %d: %v", i, err)
		default:
			if pttl := c.PTTL(ctx, lockKey(DefaultPrefix, l.Key)).Val(); pttl < 25*time.Second {
				t.Errorf("lease %d: PTTL %v after refreshing to 30s", i, pttl)
			}
		}
	}
	if v, _ := c.Get(ctx, lockKey(DefaultPrefix, stolen.Key)).Result(); v != "intruder" {
		t.Errorf("the stolen key's value is %q: the batch touched another owner's grant", v)
	}
	wantCmds := int64(3) // single server: 250 keys in scripts of at most 100
	if _, ok := c.(*redis.ClusterClient); ok {
		wantCmds = int64(len(slots))
	}
	wantPipes := int64(1)
	if flushed {
		wantCmds, wantPipes = 2*wantCmds, 2
	}
	if sent != wantCmds || pipelines != wantPipes {
		t.Errorf("RefreshBatch sent %d commands in %d pipelines, want %d in %d", sent, pipelines, wantCmds, wantPipes)
	}
}

// loadScripts loads the refresh script into every primary.
func loadScripts(t *testing.T, c redis.UniversalClient) {
	ctx := tctx(t, 10*time.Second)
	var err error
	if cc, ok := c.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return refreshScript.Load(ctx, m).Err() })
	} else {
		err = refreshScript.Load(ctx, c).Err()
	}
	if err != nil {
		t.Fatalf("SCRIPT LOAD: %v", err)
	}
}

// flushScripts empties the script cache of every primary.
func flushScripts(t *testing.T, c redis.UniversalClient) {
	ctx := tctx(t, 10*time.Second)
	var err error
	if cc, ok := c.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return m.ScriptFlush(ctx).Err() })
	} else {
		err = c.ScriptFlush(ctx).Err()
	}
	if err != nil {
		t.Fatalf("SCRIPT FLUSH: %v", err)
	}
}

// lock's renewal scheduler renews many leases of a Locker through
// RefreshBatch: pipelines of scripts, not one round trip per lease.
func TestRenewalUsesBatches(t *testing.T) {
	topologies(t, func(t *testing.T, c redis.UniversalClient) {
		var n counter
		dc := cloneClient(t, c, "")
		l := newTestLocker(t, dc, &Options{Options: lockOpts(600 * time.Millisecond)})
		ctx := tctx(t, 30*time.Second)
		base := testKey(t)
		var leases []*lock.Lease
		for i := range 40 {
			lease, err := l.TryLock(ctx, fmt.Sprintf("%s/%d", base, i))
			if err != nil {
				t.Fatalf("TryLock: %v", err)
			}
			leases = append(leases, lease)
		}
		dc.AddHook(&n)
		lanesOf(t, l).AddHook(&n)
		time.Sleep(2 * time.Second) // about ten renewals of each lease
		for i, lease := range leases {
			if err := lease.Err(); err != nil {
				t.Fatalf("lease %d lost while renewed: %v", i, err)
			}
		}
		single := n.cmds.Load() - n.batched.Load()
		t.Logf("renewal scripts: %d in %d pipelines, %d alone", n.batched.Load(), n.pipelines.Load(), single)
		if n.pipelines.Load() == 0 || single > n.batched.Load()/4 {
			t.Errorf("renewals: %d scripts in %d pipelines, %d alone; want mostly batches", n.batched.Load(), n.pipelines.Load(), single)
		}
		for _, lease := range leases {
			lease.Unlock(ctx)
		}
	})
}
