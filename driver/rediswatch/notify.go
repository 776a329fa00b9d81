package rediswatch

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/redis/go-redis/v9"
)

// Waiting: one pub/sub connection per Locker, opened on the first
// Subscribe, carries every key's release channel. Channels are reference
// counted: the first waiter on a key subscribes; the subscription outlives
// the last one by defaultLinger, so that a key locked again and again (a
// hot key) is not subscribed anew for every wait. A Subscribe returns once the
// server has processed the channel's SUBSCRIBE (a PING queued behind it
// has been answered), so a release published after it returns is seen.
//
// A queued waiter (see queue.go) is also reachable through its Locker's
// inbox, a channel of its own (P + "inbox:" + 32 hex digits) subscribed
// on the first queued wait and kept until Close: a release names the
// first waiter on that waiter's inbox, so that one message reaches one
// Locker, instead of every Locker waiting on the key.
//
// One goroutine reads the connection and wakes the waiters of each
// message's channel; it stops in Close.
//
// go-redis reconnects and resubscribes after a connection error. A release
// published meanwhile is lost, so after every reconnection every waiter is
// woken once and retries. A connection that goes silent (a partition, a
// paused server) is found by a PING after 5s without traffic, and dropped
// if the PING is not answered within another 5s.

const (
	defaultHealthEvery = 5 * time.Second
	// confirmWait bounds how long Subscribe waits for the server to confirm
	// the subscription; past it, the waiter still has its retry backoff.
	confirmWait = 2 * time.Second
	maxErrWait  = time.Second
	// defaultLinger is how long a channel stays subscribed after its last
	// waiter.
	defaultLinger = 5 * time.Second
)

var errNotifierClosed = errors.New("rediswatch: locker closed")

type notifier struct {
	client      redis.UniversalClient
	healthEvery time.Duration // set before the first subscribe
	linger      time.Duration // defaultLinger; set before the first subscribe
	inbox       string        // this Locker's inbox channel
	reconnects  atomic.Uint64

	mu     sync.Mutex
	closed bool
	ps     *redis.PubSub
	ctx    context.Context // of the reader's calls (a dial, say); ends in close
	stop   context.CancelFunc
	done   chan struct{} // closed when the reader goroutine ends
	subs   map[string]*subscription
	owners map[string]*waiter       // queued waiters, reached through the inbox
	pings  map[string]*subscription // PING payload -> the channel it confirms
	seq    uint64
}

// subscription is the state of one subscribed channel.
type subscription struct {
	waiters map[*waiter]struct{}
	ready   chan struct{} // closed once the server processed the SUBSCRIBE
	idle    *time.Timer   // without waiters: unsubscribes when it fires
}

func (s *subscription) confirm() {
	select {
	case <-s.ready:
	default:
		close(s.ready)
	}
}

// waiter is one subscriber of a channel: a queued Lock call (owner set),
// woken only by a release that names it or names no one, or a caller of
// Subscribe (owner ""), woken by every release.
type waiter struct {
	c     chan struct{}
	owner string
}

func newNotifier(client redis.UniversalClient, prefix string) *notifier {
	return &notifier{
		client: client, healthEvery: defaultHealthEvery, linger: defaultLinger,
		inbox: prefix + inboxInfix + redisx.NewInboxID(),
		subs:  map[string]*subscription{}, owners: map[string]*waiter{}, pings: map[string]*subscription{},
	}
}

// Subscribe implements driver.Notifier.
func (d *watchDriver) Subscribe(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	return d.n.subscribe(ctx, channel(d.lockKey(key)), "")
}

// subscribe adds a waiter on channel, woken by every release announced
// there; with an owner, also by a release that names it on the inbox. It
// returns once the server has processed the subscriptions (or after
// confirmWait), with the waiter's channel and the function that removes it.
func (n *notifier) subscribe(ctx context.Context, channel, owner string) (<-chan struct{}, func(), error) {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil, nil, errNotifierClosed
	}
	if n.ps == nil {
		n.ps = n.client.Subscribe(context.WithoutCancel(ctx))
		n.ctx, n.stop = context.WithCancel(context.Background())
		n.done = make(chan struct{})
		go n.read(n.ctx, n.ps)
	}
	sub, err := n.subscribeLocked(ctx, channel)
	var inbox *subscription
	if err == nil && owner != "" {
		inbox, err = n.subscribeLocked(ctx, n.inbox)
	}
	if err != nil {
		if sub != nil && len(sub.waiters) == 0 && sub.idle == nil {
			n.lingerLocked(channel, sub) // the key's channel, subscribed in vain
		}
		n.mu.Unlock()
		return nil, nil, withCtx(ctx, err)
	}
	if sub.idle != nil {
		sub.idle.Stop()
		sub.idle = nil
	}
	w := &waiter{c: make(chan struct{}, 1), owner: owner}
	sub.waiters[w] = struct{}{}
	if owner != "" {
		n.owners[owner] = w
	}
	n.mu.Unlock()

	cancel := sync.OnceFunc(func() { n.unsubscribe(channel, sub, w) })
	t := time.NewTimer(confirmWait)
	defer t.Stop()
	for _, s := range []*subscription{sub, inbox} {
		if s == nil {
			continue
		}
		select {
		case <-s.ready:
		case <-t.C:
			return w.c, cancel, nil
		case <-ctx.Done():
			cancel()
			return nil, nil, ctx.Err()
		}
	}
	return w.c, cancel, nil
}

// subscribeLocked returns channel's subscription, subscribing to it first
// if needed.
func (n *notifier) subscribeLocked(ctx context.Context, channel string) (*subscription, error) {
	if sub := n.subs[channel]; sub != nil {
		return sub, nil
	}
	if err := n.ps.Subscribe(ctx, channel); err != nil {
		// go-redis remembers the channel for resubscription even when
		// the command could not be sent; make it forget.
		n.unsubscribeLocked(channel)
		return nil, err
	}
	sub := &subscription{waiters: map[*waiter]struct{}{}, ready: make(chan struct{})}
	n.subs[channel] = sub
	n.seq++
	token := "dlock-sub-" + strconv.FormatUint(n.seq, 10)
	n.pings[token] = sub
	if err := n.ps.Ping(ctx, token); err != nil {
		// Unconfirmed: Subscribe waits confirmWait, or for the
		// reconnection that confirms every channel (wakeAll).
		delete(n.pings, token)
	}
	return sub, nil
}

// inboxFor returns the inbox channel that releases may name owner on: the
// Locker's inbox once subscribed, else "" (then releases name owner on
// the key's channel).
func (n *notifier) inboxFor(owner string) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if sub := n.subs[n.inbox]; sub != nil && n.owners[owner] != nil {
		select {
		case <-sub.ready:
			return n.inbox
		default:
		}
	}
	return ""
}

// confirmed reports whether channel is subscribed, the server having
// processed the SUBSCRIBE: a Subscribe on it returns at once.
func (n *notifier) confirmed(channel string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	sub := n.subs[channel]
	if sub == nil {
		return false
	}
	select {
	case <-sub.ready:
		return true
	default:
		return false
	}
}

// unsubscribe removes w from channel's waiters; the last one leaves the
// channel subscribed for linger more.
func (n *notifier) unsubscribe(channel string, sub *subscription, w *waiter) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(sub.waiters, w)
	if w.owner != "" && n.owners[w.owner] == w {
		delete(n.owners, w.owner)
	}
	if len(sub.waiters) > 0 || n.closed || n.subs[channel] != sub {
		return
	}
	n.lingerLocked(channel, sub)
}

// lingerLocked unsubscribes channel, which has no waiters, after linger,
// unless a waiter comes meanwhile.
func (n *notifier) lingerLocked(channel string, sub *subscription) {
	sub.idle = time.AfterFunc(n.linger, func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.subs[channel] == sub && len(sub.waiters) == 0 && !n.closed {
			delete(n.subs, channel)
			n.unsubscribeLocked(channel)
		}
	})
}

func (n *notifier) unsubscribeLocked(channel string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = n.ps.Unsubscribe(ctx, channel)
}

// read receives from ps until close.
func (n *notifier) read(ctx context.Context, ps *redis.PubSub) {
	defer close(n.done)
	var (
		healthPending bool          // a health PING is unanswered
		broken        bool          // the connection failed; not yet back
		errWait       time.Duration // pause after consecutive errors
	)
	for {
		var (
			msg any
			err error
		)
		if healthPending {
			// With a context deadline instead of a timeout, go-redis treats
			// a read timeout as a dead connection and reconnects.
			c, cancel := context.WithTimeout(ctx, n.healthEvery)
			msg, err = ps.Receive(c)
			cancel()
		} else {
			msg, err = ps.ReceiveTimeout(ctx, n.healthEvery)
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			var ne net.Error
			if !healthPending && errors.As(err, &ne) && ne.Timeout() {
				healthPending = true
				c, cancel := context.WithTimeout(ctx, time.Second)
				_ = ps.Ping(c, "dlock-health")
				cancel()
				continue
			}
			healthPending, broken = false, true
			errWait = min(max(2*errWait, 10*time.Millisecond), maxErrWait)
			t := time.NewTimer(errWait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		healthPending, errWait = false, 0
		if broken {
			broken = false
			n.reconnects.Add(1)
			n.wakeAll()
		}
		switch m := msg.(type) {
		case *redis.Message:
			if m.Channel == n.inbox {
				n.handOver(m.Payload)
			} else {
				n.wake(m.Channel, m.Payload)
			}
		case *redis.Pong:
			n.ack(m.Payload)
		}
	}
}

// wake passes a release on channel to its waiters: a release that names
// the owner queued first (payload) wakes that owner's waiter and the
// Subscribe callers; one that names no one wakes every waiter.
func (n *notifier) wake(channel, payload string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	sub := n.subs[channel]
	if sub == nil {
		return
	}
	for w := range sub.waiters {
		if payload == "" || w.owner == "" || w.owner == payload {
			w.signal()
		}
	}
}

// handOver wakes the queued waiter of owner, named by a release on the
// inbox: the key is free and it is first in line.
func (n *notifier) handOver(owner string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if w := n.owners[owner]; w != nil {
		w.signal()
	}
}

// wakeAll wakes every waiter and lets every pending Subscribe return:
// after a reconnection their subscriptions are in place again.
func (n *notifier) wakeAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, sub := range n.subs {
		for w := range sub.waiters {
			w.signal()
		}
		sub.confirm()
	}
	clear(n.pings)
}

func (n *notifier) ack(token string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if sub, ok := n.pings[token]; ok {
		sub.confirm()
		delete(n.pings, token)
	}
}

func (w *waiter) signal() {
	select {
	case w.c <- struct{}{}:
	default:
	}
}

// close ends the subscription and its goroutine.
func (n *notifier) close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	ps := n.ps
	for _, sub := range n.subs {
		if sub.idle != nil {
			sub.idle.Stop()
		}
	}
	n.mu.Unlock()
	if ps == nil {
		return nil
	}
	n.stop() // ends a dial under way, so that ps.Close need not wait for it
	err := ps.Close()
	<-n.done
	if errors.Is(err, redis.ErrClosed) {
		err = nil
	}
	return err
}
