package zookeeper

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dlock-go/dlock/driver"
	qrule "github.com/dlock-go/dlock/internal/queue"
	"github.com/go-zookeeper/zk"
)

var _ driver.Inspector = (*zkDriver)(nil)

// Inspect implements driver.Inspector with reads alone: a sync (so that
// the listing is as recent as the leader's), the key node's children, and
// one exists per lock node (sent together, in one round trip's time),
// which gives its czxid (the fencing token) and ctime. No node is made,
// written, watched or deleted.
//
// The lock nodes are judged by the rule the driver grants with (judge,
// internal/queue): in sequence order, the nodes that nothing before them
// blocks are the holders (a prefix of the queue), the others the waiters,
// first in line first. A holder's Since is its node's creation, which is
// when its request was made: one that waited was granted later. No grant
// has a remaining time: it lasts as long as its session. Nodes that other
// clients name (zk.Lock's "lock-", Curator's "_c_<uuid>-lock-") are
// exclusive and foreign, their name as owner. A node deleted between the
// listing and its exists is left out, and so is a holder's node with
// data (its grant's note: see create) deleted before the get that reads
// it; nodes of other clients are not read (Curator writes its client's
// address there, not a note).
func (d *zkDriver) Inspect(ctx context.Context, key string) (driver.KeyState, error) {
	st := driver.KeyState{Unknown: driver.Unknown{Remaining: true}}
	if err := ctx.Err(); err != nil {
		return st, err
	}
	if err := d.start.await(ctx); err != nil {
		return st, err
	}
	kp := d.keyPath(key)
	names, err := d.childrenSynced(ctx, kp)
	if err != nil {
		return st, fmt.Errorf("zookeeper: inspect: listing %s: %w", kp, err)
	}
	var queue []child
	for _, name := range names {
		if c, ok := parseChild(name); ok {
			queue = append(queue, c)
		}
	}
	slices.SortFunc(queue, func(a, b child) int { return cmp.Compare(a.seq, b.seq) })
	granted := qrule.Holders(rules(queue))
	if len(queue)-granted > driver.MaxInspectWaiters {
		queue, st.MoreWaiters = queue[:granted+driver.MaxInspectWaiters], true
	}
	stats := make([]*future[existsResult], len(queue))
	for i, c := range queue {
		path := kp + "/" + c.name
		stats[i] = start(d, false, func() (existsResult, error) {
			ok, s, err := d.conn.Exists(path)
			return existsResult{ok, s}, err
		})
	}
	var notes []noteRead
	for i, c := range queue {
		r, err := stats[i].wait(ctx)
		if err != nil {
			return driver.KeyState{Unknown: st.Unknown}, fmt.Errorf("zookeeper: inspect: exists %s/%s: %w", kp, c.name, err)
		}
		if !r.ok {
			continue // deleted since the listing
		}
		owner, foreign := nodeOwner(c.name)
		mode := driver.Exclusive
		switch {
		case c.limit > 0:
			mode = driver.Permit
		case c.shared:
			mode = driver.Shared
		}
		since := time.UnixMilli(r.st.Ctime)
		if i < granted {
			st.Holders = append(st.Holders, driver.Holder{Owner: owner, Foreign: foreign, Mode: mode, Limit: c.limit, Token: uint64(r.st.Czxid), Since: since})
			if !foreign && r.st.DataLength > 0 {
				notes = append(notes, noteRead{len(st.Holders) - 1, kp + "/" + c.name})
			}
		} else {
			st.Waiters = append(st.Waiters, driver.Waiter{Owner: owner, Mode: mode, Limit: c.limit, Since: since})
		}
	}
	if st.Holders, err = d.readNotes(ctx, st.Holders, notes); err != nil {
		return driver.KeyState{Unknown: st.Unknown}, err
	}
	return st, nil
}

// noteRead is a holder whose node has data: its grant's note (see
// create), read by readNotes.
type noteRead struct {
	holder int // index in the holders
	path   string
}

// readNotes sets the Note of the holders in reads from their nodes' data
// (one get each, sent together), and returns the holders without those
// whose node was deleted since its exists: their grant ended meanwhile,
// and a holder shown without its note would be a leader without its
// announcement. Nodes without data (no note, the common case) cost no
// request.
func (d *zkDriver) readNotes(ctx context.Context, holders []driver.Holder, reads []noteRead) ([]driver.Holder, error) {
	type got struct {
		data []byte
		gone bool
	}
	data := make([]*future[got], len(reads))
	for i, r := range reads {
		data[i] = start(d, false, func() (got, error) {
			b, _, err := d.conn.Get(r.path)
			if errors.Is(err, zk.ErrNoNode) {
				return got{gone: true}, nil
			}
			return got{data: b}, err
		})
	}
	gone := make([]bool, len(holders))
	for i, r := range reads {
		g, err := data[i].wait(ctx)
		if err != nil {
			return holders, fmt.Errorf("zookeeper: inspect: get %s: %w", r.path, err)
		}
		holders[r.holder].Note, gone[r.holder] = string(g.data), g.gone
	}
	live := holders[:0]
	for i, h := range holders {
		if !gone[i] {
			live = append(live, h)
		}
	}
	return live, nil
}

// nodeOwner returns the owner token in a lock node's name that the driver
// made ("_c_" + 32 hex digits + "-"), or the whole name and true for a
// node that another client made.
func nodeOwner(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, protectedPrefix)
	if !ok || len(rest) < 33 || rest[32] != '-' || !driver.IsOwner(rest[:32]) {
		return name, true
	}
	return rest[:32], false
}
