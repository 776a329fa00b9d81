package etcd

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func slotOwner(i int) string { return fmt.Sprintf("%032x", 0x510700+i) }

// namesSince returns the distinct keys under prefix at any revision from
// from to now (etcd's history: a name since deleted counts, as etcd's
// index keeps it until a compaction).
func namesSince(t *testing.T, raw *clientv3.Client, prefix string, from int64) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	now, err := raw.Get(ctx, prefix)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for rev := from; rev <= now.Header.Revision; rev++ {
		r, err := raw.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev), clientv3.WithKeysOnly())
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range r.Kvs {
			names[string(kv.Key)] = true
		}
	}
	return names
}

// TestNamesReused: a Locker's grants of a key reuse its entry names (the
// deleted names etcd keeps until a compaction stay few), one per attempt
// it has on the key at once; Inspect still tells each grant's owner.
func TestNamesReused(t *testing.T) {
	e := testserver.SharedEtcd(t)
	d, _ := testDriver(t, e)
	raw := rawClient(t, e.Endpoints())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k := "reused"
	q := d.names(k).queue
	start, err := raw.Get(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		l := &driver.Lease{Key: k, Owner: slotOwner(i), TTL: 10 * time.Second}
		if err := d.Acquire(ctx, l); err != nil {
			t.Fatal(err)
		}
		if err := d.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	var shared []*driver.Lease
	for i := range 3 {
		l := &driver.Lease{Key: k, Owner: slotOwner(100 + i), Mode: driver.Shared, TTL: 10 * time.Second}
		if err := d.Acquire(ctx, l); err != nil {
			t.Fatal(err)
		}
		shared = append(shared, l)
	}
	ks, err := d.Inspect(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if len(ks.Holders) != 3 {
		t.Fatalf("Inspect: %d holders, want the 3 shared", len(ks.Holders))
	}
	for i, h := range ks.Holders {
		if h.Owner != shared[i].Owner {
			t.Errorf("Inspect: holder %d's owner is %s, want %s", i, h.Owner, shared[i].Owner)
		}
	}
	for _, l := range shared {
		if err := d.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	names := namesSince(t, raw, q, start.Header.Revision+1)
	t.Logf("23 grants of %q wrote %d names: %v", k, len(names), names)
	if len(names) != 3 {
		t.Fatalf("23 grants, at most 3 at once, wrote %d names, want 3", len(names))
	}
}

// reusedName grants a on key k, then makes its name free again as the
// given way does, and grants b, which must have a's name (else the test
// is skipped: the sequence did not happen).
func reusedName(t *testing.T, d *etcdDriver, ctx context.Context, k string, free func(a *driver.Lease)) (a, b *driver.Lease) {
	t.Helper()
	a = &driver.Lease{Key: k, Owner: slotOwner(1), TTL: 10 * time.Second}
	if err := d.Acquire(ctx, a); err != nil {
		t.Fatal(err)
	}
	free(a)
	b = &driver.Lease{Key: k, Owner: slotOwner(2), TTL: 10 * time.Second}
	if err := d.Acquire(ctx, b); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Release(context.Background(), b) })
	ra, rb := a.Data.(grantRef), b.Data.(grantRef)
	if ra.name != rb.name {
		t.Fatalf("b's entry is %s, not a's %s: the name was not reused", rb.name, ra.name)
	}
	return a, b
}

// TestReusedNameStaleCalls: once a grant's entry is gone (deleted behind
// its back: its holder watch frees its name) and a later grant of the
// Locker has its name, the first grant's release, refresh and Resume
// find no grant, and leave the later one as it was: a name is not a
// grant; its create revision is.
func TestReusedNameStaleCalls(t *testing.T) {
	e := testserver.SharedEtcd(t)
	d, _ := testDriver(t, e)
	raw := rawClient(t, e.Endpoints())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k := "stale-after-reuse"
	lost := make(chan error, 1)
	a, b := reusedName(t, d, ctx, k, func(a *driver.Lease) {
		a.Lost = func(err error) {
			select {
			case lost <- err:
			default:
			}
		}
		d.watchHolder(a, d.names(k), a.Data.(grantRef).create+1) // with Lost set
		if _, err := raw.Delete(ctx, entryKey(d, a)); err != nil {
			t.Fatal(err)
		}
		select {
		case <-lost:
		case <-time.After(10 * time.Second):
			t.Fatal("a's deletion was not seen")
		}
	})
	stale := *a
	stale.Lost = nil
	if _, errs := d.RefreshBatch(ctx, []*driver.Lease{&stale}, 10*time.Second); !errors.Is(errs[0], driver.ErrNotHeld) {
		t.Errorf("refresh of the deleted grant, its name now another's: %v, want ErrNotHeld", errs[0])
	}
	if err := d.Release(ctx, &stale); !errors.Is(err, driver.ErrNotHeld) {
		t.Errorf("release of the deleted grant: %v, want ErrNotHeld", err)
	}
	r, err := raw.Get(ctx, entryKey(d, b))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kvs) != 1 || r.Kvs[0].CreateRevision != b.Data.(grantRef).create {
		t.Fatalf("the later grant's entry after the stale calls: %v", r.Kvs)
	}
	if _, errs := d.RefreshBatch(ctx, []*driver.Lease{b}, 10*time.Second); errs[0] != nil {
		t.Fatalf("refresh of the later grant: %v", errs[0])
	}
}

// TestReusedNameHolderCheck: a holder whose watch found its revision
// compacted reads its entry (checkHolder); a later grant under its name,
// on the same lease (a spare), is not its own.
func TestReusedNameHolderCheck(t *testing.T) {
	e := testserver.SharedEtcd(t)
	d, _ := testDriver(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, b := reusedName(t, d, ctx, "holder-check", func(a *driver.Lease) {
		if err := d.Release(ctx, a); err != nil {
			t.Fatal(err)
		}
	})
	if leaseOf(a) != leaseOf(b) {
		t.Skipf("b is on lease %x, not a's spare %x: the sequence did not happen", leaseOf(b), leaseOf(a))
	}
	ended := false
	d.checkHolder(entryKey(d, a), a.Data.(grantRef), func() { ended = true })
	if !ended {
		t.Fatal("a's holder check found b's entry (same name, same lease) and took it for a's grant")
	}
	ended = false
	d.checkHolder(entryKey(d, b), b.Data.(grantRef), func() { ended = true })
	if ended {
		t.Fatal("b's holder check ended b, whose entry is there")
	}
}

// TestDeleteOwnChecksOwner: a clean-up that does not know its grant's
// generation (a lost reply) deletes the entry under its name only if the
// entry names its owner.
func TestDeleteOwnChecksOwner(t *testing.T) {
	e := testserver.SharedEtcd(t)
	d, _ := testDriver(t, e)
	raw := rawClient(t, e.Endpoints())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := &driver.Lease{Key: "delete-own", Owner: slotOwner(2), TTL: 10 * time.Second}
	if err := d.Acquire(ctx, b); err != nil {
		t.Fatal(err)
	}
	defer d.Release(ctx, b)
	c, err := d.client()
	if err != nil {
		t.Fatal(err)
	}
	key := entryKey(d, b)
	prev, err := deleteOwn(ctx, c, key, slotOwner(1), 0)
	if err != nil || len(prev) != 0 {
		t.Fatalf("deleteOwn of another owner's entry: deleted %d, %v", len(prev), err)
	}
	r, err := raw.Get(ctx, key)
	if err != nil || len(r.Kvs) != 1 {
		t.Fatalf("b's entry after another owner's clean-up: %v %v", r, err)
	}
	if prev, err = deleteOwn(ctx, c, key, b.Owner, 0); err != nil || len(prev) != 1 {
		t.Fatalf("deleteOwn of b's own entry: deleted %d, %v", len(prev), err)
	}
}
