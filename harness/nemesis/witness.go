package nemesis

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/harness/chaos"
	"github.com/dlock-go/dlock/lock"
)

// witnessTTL is the TTL of a witness's leases: longer than the faults it
// watches leave a healthy client without an answer, shorter than them
// all together.
const witnessTTL = 3 * time.Second

// witness runs fault, which must spare healthy clients (PgBouncer
// restarted, one etcd member frozen, cut off or slowed while the others
// keep their quorum), under the eyes of two Lockers of their own (over
// the run's environment proxies, which member faults reach too): one
// holds a fresh key, renewed, and the other waits for it. After the
// fault, the holder must still hold its lease (held-lost), and once it
// unlocks, the waiter must be granted within LivenessBound plus the
// target's Recovery (liveness/witness: a wait the fault failed, or left
// stuck).
func (r *run) witness(what string, fault func()) {
	key := fmt.Sprintf("witness/%d", r.witnesses.Add(1))
	holder, waiter, err := r.witnessLockers()
	if err != nil {
		r.problem("open the witness's Lockers: %v", err)
		fault()
		return
	}
	defer holder.Close()
	defer waiter.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	lease, err := holder.Lock(ctx, key, lock.WithTTL(witnessTTL))
	cancel()
	if err != nil {
		r.rec.Stat("witness-skipped", 1) // a fault of another client's still heals
		fault()
		return
	}
	r.rec.Stat("witness", 1)
	type result struct {
		lease *lock.Lease
		err   error
		at    Stamp
	}
	got := make(chan result, 1)
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	go func() {
		l, err := waiter.Lock(wctx, key, lock.WithTTL(witnessTTL))
		got <- result{l, err, r.clk.Now()}
	}()
	time.Sleep(300 * time.Millisecond) // the waiter queues
	start := r.clk.Now()
	fault()
	time.Sleep(time.Second) // the clients find the healed path
	now := r.clk.Now()
	if closed(lease.Done()) {
		r.rec.Violate(Violation{Kind: "held-lost", At: now, From: start, Key: key, Proc: parentProc,
			Text: fmt.Sprintf("witness key %q: the holder's lease (TTL %v, renewed) was lost across %s, which spares healthy clients: %v", key, witnessTTL, what, lease.Err())})
	}
	uctx, ucancel := context.WithTimeout(context.Background(), 5*time.Second)
	lease.Unlock(uctx)
	ucancel()
	released := r.clk.Now()
	bound := LivenessBound + r.tg.Recovery
	select {
	case res := <-got:
		r.witnessWaited(key, what, start, released, bound, res.lease, res.err, res.at)
	case <-time.After(bound):
		now := r.clk.Now()
		r.rec.Violate(Violation{Kind: "liveness", Check: "witness", At: now, From: released, Key: key, Proc: parentProc,
			Text: fmt.Sprintf("witness key %q: the waiter queued before %s was not granted within %v of the holder's release", key, what, bound)})
	}
}

// witnessWaited judges the witness's waiter, which returned at at: it
// must have been granted, after the holder released.
func (r *run) witnessWaited(key, what string, start, released Stamp, bound time.Duration, l *lock.Lease, err error, at Stamp) {
	if err != nil {
		r.rec.Violate(Violation{Kind: "liveness", Check: "witness", At: at, From: start, Key: key, Proc: parentProc,
			Text: fmt.Sprintf("witness key %q: the waiter queued before %s failed at %v (the holder released at %v): %v", key, what, at, released, err)})
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	l.Unlock(ctx)
	cancel()
}

// witnessLockers opens the witness's holder and waiter, over the run's
// environment proxies (the server's addresses where it has none).
func (r *run) witnessLockers() (Locker, Locker, error) {
	addrs := r.serverAddrs()
	if len(r.envProxies) > 0 {
		addrs = r.clientAddrs(r.envProxies)
	}
	holder, err := r.open(addrs, 10*time.Second)
	if err != nil {
		return nil, nil, err
	}
	waiter, err := r.open(addrs, 10*time.Second)
	if err != nil {
		holder.Close()
		return nil, nil, err
	}
	return holder, waiter, nil
}

// quietWitness is the witness with no fault at all (the memory driver's
// "witness" fault): a broken lock shows there that the witness's checks
// can fail.
func (n *nemesis) quietWitness() bool {
	d := n.between(200*time.Millisecond, time.Second)
	n.spawn(func() { n.r.witness("no fault", func() { n.sleep(d) }) })
	return true
}

// envProxiesFor are the proxies a member fault acts on for member i: each
// client's (the test process's Lockers, the children's, the prober's and
// the witness's).
func (r *run) envProxiesFor(i int) []*chaos.Proxy {
	var out []*chaos.Proxy
	add := func(ps []*chaos.Proxy) {
		if i < len(ps) {
			out = append(out, ps[i])
		}
	}
	for _, s := range r.slots {
		add(s.proxies)
	}
	for _, c := range r.children {
		add(c.proxies)
	}
	add(r.envProxies)
	return out
}
