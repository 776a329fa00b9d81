package nemesis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock/harness/chaos"
	"github.com/dlock-go/dlock/lock"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The adversary of the etcd targets: a user with read rights only on the
// driver's prefix (chaos.EtcdReaderUser; the target turns etcd's
// authentication on before the run, and the Lockers log in as the
// application's user). It reads every entry and counter, watches the
// prefix, and at random moments tries what a reader might: delete an
// entry it read, overwrite one with a forged token, raise a key's
// counter, revoke an entry's etcd lease, take a hot key through a Locker
// of its own (dlock's driver, its credentials). etcd must refuse each;
// one that is not refused is a harness problem that fails the run, but
// for a revoke: etcd checks a LeaseRevoke against the keys attached to
// the lease, so it lets any user revoke a lease whose entry was deleted
// since the read (a release deletes the entry, then revokes the lease):
// such a revoke is counted, and its effects judged by the checker (see
// revoke). It
// does not renew leases it read: etcd lets any user renew any lease
// (LeaseKeepAlive names no key), which keeps a dead holder's grant alive
// (a liveness matter, not a safety one) and would break the run's bound.
type etcdAdversary struct {
	r    *run
	c    *clientv3.Client
	lk   Locker // dlock's driver as the reader
	stop chan struct{}
	wg   sync.WaitGroup

	mu     sync.Mutex
	rng    *rand.Rand
	counts map[string]int
	leases map[int64]string // the entry (name@create revision) each lease was last read on (see spares)
}

const etcdPrefix = "nemesis/"

// startEtcdAdversary logs in as the reader and checks its rights.
func (r *run) startEtcdAdversary() *etcdAdversary {
	c, err := chaos.EtcdClient(r.srv.Addrs, chaos.EtcdReaderUser, chaos.EtcdReaderPassword)
	if err != nil {
		r.problem("adversary: %v", err)
		return nil
	}
	lk, err := lock.Open(context.Background(), fmt.Sprintf("etcd://%s:%s@%s/nemesis", chaos.EtcdReaderUser, chaos.EtcdReaderPassword, strings.Join(r.srv.Addrs, ",")))
	if err != nil {
		c.Close()
		r.problem("adversary: %v", err)
		return nil
	}
	a := &etcdAdversary{r: r, c: c, lk: lk, stop: make(chan struct{}), rng: rand.New(rand.NewPCG(r.cfg.Seed, 17)), counts: map[string]int{}, leases: map[int64]string{}}
	if err := a.checkRights(); err != nil {
		a.close()
		r.problem("adversary: %v", err)
		return nil
	}
	a.wg.Add(2)
	go a.watch()
	go a.loop()
	return a
}

// checkRights makes sure the reader reads the prefix and can write
// nothing under it, and that its Locker is refused a lock.
func (a *etcdAdversary) checkRights() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := a.c.Get(ctx, etcdPrefix, clientv3.WithPrefix()); err != nil {
		return fmt.Errorf("the reader cannot read %s: %w", etcdPrefix, err)
	}
	if _, err := a.c.Put(ctx, etcdPrefix+"q/adversary/x", "dlock1 x 0 1 1"); !chaos.EtcdDenied(err) {
		return fmt.Errorf("the reader may put under %s: it answered %v, want permission denied", etcdPrefix, err)
	}
	if _, err := a.c.Delete(ctx, etcdPrefix, clientv3.WithPrefix()); !chaos.EtcdDenied(err) {
		return fmt.Errorf("the reader may delete under %s: it answered %v, want permission denied", etcdPrefix, err)
	}
	if l, err := a.lk.TryLock(ctx, "adversary"); err == nil {
		l.Unlock(ctx)
		return fmt.Errorf("the reader's Locker was granted a lock")
	}
	return nil
}

func (a *etcdAdversary) close() {
	if a == nil {
		return
	}
	if a.stop != nil && !closed(a.stop) {
		close(a.stop)
	}
	a.wg.Wait()
	a.lk.Close()
	a.c.Close()
}

// Counts returns what the adversary read and tried, by kind.
func (a *etcdAdversary) Counts() map[string]int {
	if a == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]int{}
	for k, v := range a.counts {
		out[k] = v
	}
	return out
}

func (a *etcdAdversary) count(kind string) {
	a.mu.Lock()
	a.counts[kind]++
	a.mu.Unlock()
}

// watch counts the events it sees under the prefix.
func (a *etcdAdversary) watch() {
	defer a.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-a.stop; cancel() }()
	for ctx.Err() == nil {
		for resp := range a.c.Watch(ctx, etcdPrefix, clientv3.WithPrefix()) {
			if len(resp.Events) > 0 {
				a.count("watched")
			}
		}
		sleepOrStop(200*time.Millisecond, a.stop)
	}
}

// loop reads the entries and, every 50 to 500ms, tries one write.
func (a *etcdAdversary) loop() {
	defer a.wg.Done()
	for !closed(a.stop) {
		sleepOrStop(between(a.rng, 50*time.Millisecond, 500*time.Millisecond), a.stop)
		a.try()
	}
}

// try reads the prefix and tries one write it has no right to.
func (a *etcdAdversary) try() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := a.c.Get(ctx, etcdPrefix, clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) == 0 {
		return // a fault under way
	}
	a.count("read")
	a.spares(resp.Kvs)
	kv := resp.Kvs[a.rng.IntN(len(resp.Kvs))]
	key := string(kv.Key)
	var what string
	switch a.rng.IntN(5) {
	case 0:
		what = "delete"
		_, err = a.c.Delete(ctx, key)
	case 1:
		what = "forge"
		_, err = a.c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)).
			Then(clientv3.OpPut(key, strings.Replace(string(kv.Value), " x ", " s ", 1)+" 9", clientv3.WithIgnoreLease())).Commit()
	case 2:
		what = "counter"
		_, err = a.c.Put(ctx, etcdPrefix+"c/"+pick(a.rng, a.r.env.keys), "99999999999999999")
	case 3:
		if kv.Lease == 0 {
			return
		}
		a.revoke(ctx, key, kv.Lease, resp.Header.Revision)
		return
	default:
		what = "trylock"
		var l *lock.Lease
		if l, err = a.lk.TryLock(ctx, pick(a.rng, a.r.env.keys)); err == nil {
			l.Unlock(ctx)
			a.r.problem("adversary: the reader's Locker was granted a lock")
			return
		}
		a.count(what + "-refused")
		return
	}
	switch {
	case chaos.EtcdDenied(err):
		a.count(what + "-refused")
	case err == nil:
		a.r.problem("adversary: the reader's %s of %s was not refused", what, key)
	default:
		a.count(what + "-failed") // a fault under way
	}
}

// revoke revokes lease, which the reader found attached to key at
// revision read. etcd refuses the revoke of a lease with a key attached
// (the reader may write none), and allows it once the lease has none,
// which happens between a release's deletion of the entry and its own
// revoke: so a revoke let through is a harness problem only when it is
// sure the key was still attached, that is when no revision came between
// the read and the revoke; otherwise it is counted, as "revoke-empty"
// when the key was gone or moved off the lease before the revoke's
// revision, "revoke-unclear" when it went at that very revision (the
// revoke's own deletion, or a release's just before an empty revoke:
// etcd's history does not tell them apart), and the checker judges what
// it did.
func (a *etcdAdversary) revoke(ctx context.Context, key string, lease, read int64) {
	resp, err := a.c.Revoke(ctx, clientv3.LeaseID(lease))
	switch {
	case chaos.EtcdDenied(err):
		a.count("revoke-refused")
		return
	case err != nil:
		a.count("revoke-failed") // a fault under way, or the lease gone
		return
	}
	rev := resp.Header.Revision
	if rev == read {
		a.r.problem("adversary: the reader's revoke of lease %x, attached to %s at revision %d with no revision since, was not refused", lease, key, read)
		return
	}
	at := func(rev int64) (bool, error) {
		g, err := a.c.Get(ctx, key, clientv3.WithRev(rev))
		if err != nil {
			return false, err
		}
		return len(g.Kvs) == 1 && g.Kvs[0].Lease == lease, nil
	}
	after, err1 := at(rev)
	before, err2 := at(rev - 1)
	switch {
	case err1 != nil || err2 != nil:
		a.count("revoke-unchecked") // compacted, or a fault under way
	case after:
		a.r.problem("adversary: the reader's revoke of lease %x was answered at revision %d, where %s is still attached to it", lease, rev, key)
	case before:
		a.count("revoke-unclear")
	default:
		a.count("revoke-empty")
	}
}

// spares counts the entries read on a lease that an earlier read found
// on another entry ("lease-reused"): a released grant's lease kept as a
// spare and granted again (driver/etcd's spares.go), which the reader
// may revoke while it has no key (revoke-empty); "lease-reused-by-waiter"
// when the entry was written before (a waiter's place) and now holds a
// token: a queued waiter's grant moved onto a spare (fast.go's fastStep).
func (a *etcdAdversary) spares(kvs []*mvccpb.KeyValue) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.leases) > 100000 {
		clear(a.leases)
	}
	for _, kv := range kvs {
		if kv.Lease == 0 || !strings.HasPrefix(string(kv.Key), etcdPrefix+"q/") {
			continue
		}
		entry := fmt.Sprintf("%s@%d", kv.Key, kv.CreateRevision) // a name is reused: its generation tells entries apart
		if prev, ok := a.leases[kv.Lease]; ok && prev != entry {
			a.counts["lease-reused"]++
			if f := strings.Fields(string(kv.Value)); kv.CreateRevision != kv.ModRevision && len(f) >= 5 && f[3] != "0" {
				a.counts["lease-reused-by-waiter"]++ // a queued entry granted onto a spare
			}
		}
		a.leases[kv.Lease] = entry
	}
}
