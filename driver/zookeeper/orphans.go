package zookeeper

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// No orphans: a node whose owner gave up on it would stay in its key's
// queue for as long as the session lives, blocking every later waiter. So
// every path that gives up on a node (a cancelled or failed wait, a TryLock
// that found the key held, a create whose reply was lost, a release that
// failed, a lease lost while the session may live on) hands it to discard,
// which deletes it at once if it can and otherwise leaves it to the
// monitor's janitor, which retries while the session may be alive.

// orphan is a node to delete: path when known; else the node of owner
// under keyPath, found by its protected prefix (a create whose reply was
// lost).
type orphan struct {
	keyPath, owner string
	path           string
	// session is the session the node belongs to (0: unknown): the
	// janitor drops the orphan once that session is over.
	session int64
}

// discardWait bounds how long a call that gives up on its node waits for
// the deletion before leaving it to the janitor.
const discardWait = 500 * time.Millisecond

// discard deletes owner's node under keyPath: path if known, else
// whatever node carries owner's prefix.
func (d *zkDriver) discard(keyPath, owner, path string) {
	o := &orphan{keyPath: keyPath, owner: owner, path: path}
	ctx, cancel := context.WithTimeout(context.Background(), discardWait)
	defer cancel()
	if !d.clean(ctx, o) {
		d.mon.adopt(o)
	}
}

// clean tries once to delete o's node and reports whether o is settled
// (deleted, or known not to exist).
func (d *zkDriver) clean(ctx context.Context, o *orphan) bool {
	if o.path != "" {
		err := deleteNode(ctx, d, o.path)
		return err == nil || errors.Is(err, zk.ErrNoNode)
	}
	_, err := d.deleteOwned(ctx, o.keyPath, o.owner)
	return err == nil
}

// cleanAll tries once to settle os (see clean) and returns those it did
// not, a duplicate once. It costs a round trip or three whatever their
// number, in requests that go together: the nodes of known path are
// deleted; for the others one sync, then one listing per key, and the
// owners' nodes deleted. Cleaned one after the other, each orphan by
// owner a sync and a listing, the janitor fell far behind over a slow
// link, where a failed set attempt adopts one per member and per release
// attempt (lock's release by owner, which outlasts ReleaseTimeout
// there), and a node behind them stayed at the head of its key's queue
// for many seconds.
func (d *zkDriver) cleanAll(ctx context.Context, os []*orphan) []*orphan {
	seen := make(map[orphan]bool, len(os))
	settled := make([]bool, len(os))
	byKey := map[string][]int{}
	var wg sync.WaitGroup
	for i, o := range os {
		switch {
		case seen[*o]:
			settled[i] = true // the same as an earlier one
		case o.path != "":
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := deleteNode(ctx, d, o.path)
				settled[i] = err == nil || errors.Is(err, zk.ErrNoNode)
			}()
		default:
			byKey[o.keyPath] = append(byKey[o.keyPath], i)
		}
		seen[*o] = true
	}
	if len(byKey) > 0 {
		// The sync makes the listings show a create whose reply was lost,
		// if the leader applied it.
		_, err := write(ctx, d, func() (string, error) { return d.conn.Sync("/") })
		for kp, idx := range byKey {
			if err != nil {
				break
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				d.cleanOwners(ctx, kp, os, idx, settled)
			}()
		}
	}
	wg.Wait()
	var left []*orphan
	for i, o := range os {
		if !settled[i] {
			left = append(left, o)
		}
	}
	return left
}

// cleanOwners deletes the nodes of the owners of os[idx] under kp, and
// marks in settled those whose nodes are all gone.
func (d *zkDriver) cleanOwners(ctx context.Context, kp string, os []*orphan, idx []int, settled []bool) {
	children, err := childrenOf(ctx, d, kp)
	if errors.Is(err, zk.ErrNoNode) {
		children, err = nil, nil
	}
	if err != nil {
		return
	}
	for _, i := range idx {
		ok := true
		for _, name := range children {
			if !strings.HasPrefix(name, ownPrefix(os[i].owner)) {
				continue
			}
			if err := deleteNode(ctx, d, kp+"/"+name); err != nil && !errors.Is(err, zk.ErrNoNode) {
				ok = false
			}
		}
		settled[i] = ok
	}
}

// deleteOwned deletes every node of owner under keyPath and returns how
// many there were. It syncs first, so that a create whose reply was lost
// is seen if the leader applied it.
func (d *zkDriver) deleteOwned(ctx context.Context, keyPath, owner string) (int, error) {
	children, err := d.childrenSynced(ctx, keyPath)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, name := range children {
		if !strings.HasPrefix(name, ownPrefix(owner)) {
			continue
		}
		err := deleteNode(ctx, d, keyPath+"/"+name)
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			return n, err
		}
		if err == nil {
			n++
		}
	}
	return n, nil
}

// childrenSynced lists keyPath's children (none if it does not exist)
// after a sync, so that the list includes every change the leader
// committed before.
func (d *zkDriver) childrenSynced(ctx context.Context, keyPath string) ([]string, error) {
	if _, err := write(ctx, d, func() (string, error) { return d.conn.Sync("/") }); err != nil {
		return nil, err
	}
	children, err := childrenOf(ctx, d, keyPath)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	return children, err
}

func deleteNode(ctx context.Context, d *zkDriver, path string) error {
	_, err := write(ctx, d, func() (struct{}, error) { return struct{}{}, d.conn.Delete(path, -1) })
	return err
}

func childrenOf(ctx context.Context, d *zkDriver, path string) ([]string, error) {
	return read(ctx, d, func() ([]string, error) {
		c, _, err := d.conn.Children(path)
		return c, err
	})
}

type existsResult struct {
	ok bool
	st *zk.Stat
}

func exists(ctx context.Context, d *zkDriver, path string) (bool, *zk.Stat, error) {
	r, err := read(ctx, d, func() (existsResult, error) {
		ok, st, err := d.conn.Exists(path)
		return existsResult{ok, st}, err
	})
	return r.ok, r.st, err
}
