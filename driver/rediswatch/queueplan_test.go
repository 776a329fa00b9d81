package rediswatch

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/queue"
	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/dlock-go/dlock/internal/testsupport/queuetest"
	"github.com/redis/go-redis/v9"
)

// TestQueueRulePlan runs the queue rule's histories through the
// attempts' plans alone, with no server: each attempt's reads are made
// from the key's holders and waiters (planState.read), and its decision is
// the chain of plan functions the transactions run (grantRead.step or
// memberRead.step, then judgeFirst on the waiter first in line). The
// histories are TestQueueRule's.
func TestQueueRulePlan(t *testing.T) {
	var cases []queuetest.Case
	for _, c := range append(queuetest.Table, queuetest.Random(1, 200, 40)...) {
		if !queuetest.WaiterConflicts(c) {
			cases = append(cases, c)
		}
	}
	queuetest.Run(t, cases, func(t *testing.T) queuetest.Backend { return &planState{} })
}

// planEntry is an entry of planState: its id and its rule.
type planEntry struct {
	id int
	e  queue.Entry
}

// planState is a key as the plans see it: its holders (the lock key and
// the members' set) and its queue of waiters, all live.
type planState struct {
	holders, line []planEntry
}

func (p *planState) Do(id int, s queuetest.Step) (queuetest.Outcome, error) {
	if s.Op == queuetest.Leave {
		drop := func(es []planEntry) []planEntry {
			return slices.DeleteFunc(es, func(e planEntry) bool { return e.id == s.ID })
		}
		p.holders, p.line = drop(p.holders), drop(p.line)
		return queuetest.Left, nil
	}
	how := tryOnce
	if s.Op == queuetest.Join {
		how = tryThenJoin
	}
	me := planEntry{id, s.Entry}
	granted, err := p.attempt(me, how)
	switch {
	case errors.Is(err, driver.ErrInvalid):
		return queuetest.Refused, nil
	case err != nil:
		return 0, err
	case granted:
		p.holders = append(p.holders, me)
		return queuetest.Granted, nil
	case how == tryThenJoin:
		p.line = append(p.line, me)
	}
	return queuetest.Queued, nil
}

// Holders lets the waiter first in line attempt (as a release or the
// grant before it names it) while it is granted.
func (p *planState) Holders(live, want []int) ([]int, error) {
	for len(p.line) > 0 {
		granted, err := p.attempt(p.line[0], queued)
		if err != nil {
			return nil, err
		}
		if !granted {
			break
		}
		p.holders, p.line = append(p.holders, p.line[0]), p.line[1:]
	}
	var out []int
	for _, e := range p.holders {
		out = append(out, e.id)
	}
	return out, nil
}

func planOwner(id int) string { return "w" + strconv.Itoa(id) }

// attempt is the decision of me's attempt of kind how: granted, or not
// (joined or refused as held), or an error that refuses it otherwise.
func (p *planState) attempt(me planEntry, how attempt) (bool, error) {
	var line []string
	for _, w := range p.line[:min(len(p.line), 2)] {
		line = append(line, planOwner(w.id)+" "+planInbox)
	}
	held := func(err error) (bool, error) {
		if h := new(driver.HeldError); errors.As(err, &h) {
			return false, nil
		}
		return false, err
	}
	if me.e.Kind == queue.Exclusive {
		r := grantRead{holder: p.holderValue(), line: line}
		q := grantReq{how: how, lk: planLK, owner: planOwner(me.id), ttl: planTTL}
		switch r.step(&q) {
		case grantJoin, grantHeld, grantIfStale: // a marker's members are live
			return false, nil
		}
	} else {
		k := shares
		if me.e.Kind == queue.Permit {
			k = permitsOf(me.e.Limit)
		}
		q := memberReq{k: k, how: how, lk: planLK, set: k.set(planLK), owner: planOwner(me.id), ttl: planTTL.Milliseconds()}
		r := memberRead{st: p.members(k.limit), line: line}
		step, _, err := r.step(&q)
		if err != nil {
			return held(err)
		}
		if step != memberNow {
			return false, nil
		}
	}
	// firstInLine: a live waiter first in line, not the caller, refuses it.
	if len(p.line) > 0 && p.line[0].id != me.id {
		if _, err := judgeFirst(line[0], true, entryOf(p.line[0].e), permitLimitOf(me.e)); err != nil {
			return held(err)
		}
	}
	return true, nil
}

// holderValue is the lock key's value: missing, a writer's owner, "R" or
// "S<N>".
func (p *planState) holderValue() value {
	if len(p.holders) == 0 {
		return value{}
	}
	switch e := p.holders[0].e; e.Kind {
	case queue.Shared:
		return got(redisx.Readers)
	case queue.Permit:
		return got("S" + strconv.Itoa(e.Limit))
	}
	return got(planOwner(p.holders[0].id))
}

// members is what a member attempt reads: the lock key, and the live
// members in order of expiry (the latest two, and the limit-th latest).
func (p *planState) members(limit int) *memberState {
	v := p.holderValue()
	ms := float64(planNow.UnixMilli())
	var zs []redis.Z
	if v.ok && (v.s == redisx.Readers || v.s[0] == 'S') {
		for i, h := range p.holders {
			zs = append(zs, redis.Z{Score: ms + 5000 + float64(i), Member: planOwner(h.id)})
		}
	}
	var nth []redis.Z
	if limit > 0 && len(zs) >= limit {
		nth = zs[len(zs)-limit : len(zs)-limit+1]
	}
	return members(v.s, 5*time.Second, zs[max(len(zs)-2, 0):], nth)
}

// entryOf is a waiter's queue entry value (see queue.go).
func entryOf(e queue.Entry) string {
	switch e.Kind {
	case queue.Shared:
		return "s30000 0"
	case queue.Permit:
		return fmt.Sprintf("p%d:30000 0", e.Limit)
	}
	return "30000 0"
}

func permitLimitOf(e queue.Entry) int {
	if e.Kind == queue.Permit {
		return e.Limit
	}
	return 0
}
