package redisx

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Notifier carries a Locker's release notifications. Its waiters share
// one pub/sub connection (one per shard for a Ring), held by a hub. A hub
// subscribes to a key's release channel while some waiter waits on that
// key, and Linger longer, so that a busy key is not subscribed and
// unsubscribed for every waiter.
//
// Each hub also has an inbox, a channel of its own (P + "inbox:" + 32 hex
// digits), on which a release names the queued waiter it handed the key
// to, or that may take it, to wake it, so that one message reaches one
// Locker instead of every Locker waiting on the key.
//
// A subscription is confirmed when the server has answered it, so that a
// retry made after the confirmation cannot miss a release. After the
// connection was lost and made again, every waiter is woken once, when its
// channel is confirmed again: a release it missed meanwhile is found by
// that retry. A connection silent for PingEvery is pinged, and replaced if
// the pong does not come within PingEvery more.
type Notifier struct {
	client redis.UniversalClient
	prefix string
	ctx    context.Context // of its pub/sub calls: marked for an owned client (log.go)
	// PingEvery and Linger may be changed (by tests) before the first use.
	PingEvery, Linger time.Duration
	reconnects        atomic.Uint64

	mu     sync.Mutex
	hubs   map[*redis.Client]*hub // by Ring shard; nil key for other clients
	closed bool
}

// The timing of notifications.
const (
	// ConfirmWait is the longest Subscribe waits for its confirmation, and
	// the longest a queued waiter should wait for its before queueing.
	ConfirmWait = 250 * time.Millisecond
	linger      = 2 * time.Second // unsubscribe after this long unused
	pingEvery   = 5 * time.Second
	minRedial   = 50 * time.Millisecond // backoff after a failed connection
	maxRedial   = 2 * time.Second
)

// ErrNotifierClosed is returned once the Locker is closed.
var ErrNotifierClosed = errors.New("redis: notifier closed")

// NewNotifier returns the notifier of a Locker over client, whose names
// start with prefix. It connects on first use.
func NewNotifier(client redis.UniversalClient, prefix string) *Notifier {
	return &Notifier{client: client, prefix: prefix, ctx: context.Background(), PingEvery: pingEvery, Linger: linger, hubs: map[*redis.Client]*hub{}}
}

// Reconnects counts the pub/sub connections replaced after a failure.
func (n *Notifier) Reconnects() uint64 { return n.reconnects.Load() }

// Subscribe registers a waiter woken by every release of the lock key lk,
// and returns once the subscription is confirmed (or after ConfirmWait:
// a release before it takes effect is found by the caller's next retry).
func (n *Notifier) Subscribe(ctx context.Context, lk string) (<-chan struct{}, func(), error) {
	h, err := n.hub(lk, true)
	if err != nil {
		return nil, nil, err
	}
	ch := lk + ChannelSuffix
	w := make(chan struct{}, 1)
	ready := h.add(ch, func(c *channel) { c.waiters[w] = struct{}{} })
	cancel := sync.OnceFunc(func() { h.remove(func(c *channel) { delete(c.waiters, w) }, ch) })
	if ready != nil {
		t := time.NewTimer(ConfirmWait)
		defer t.Stop()
		select {
		case <-ready:
		case <-t.C:
		case <-ctx.Done():
			cancel()
			return nil, nil, ctx.Err()
		case <-h.done:
			cancel()
			return nil, nil, ErrNotifierClosed
		}
	}
	return w, cancel, nil
}

// Confirmed reports whether the release channel of lk and the inbox that
// serves it are subscribed and confirmed: a waiter queued now hears every
// release that names it.
func (n *Notifier) Confirmed(lk string) bool {
	h, err := n.hub(lk, false)
	if err != nil || h == nil {
		return false
	}
	return h.confirmed(lk+ChannelSuffix) && h.confirmed(h.inbox)
}

// A Waiter is a queued Lock call registered with a Notifier: it is woken
// (wake receives) by a release on its key's channel that names no one or
// names its owner, by a message on its inbox naming its owner, and when
// its subscriptions are confirmed or confirmed again after a reconnection.
// A message only wakes: anyone allowed to publish on the channels can send
// one, so nothing in it is taken as a grant. The waiter's next request
// reads the grant from the server.
type Waiter struct {
	h     *hub
	ch    string
	owner string
	wake  chan<- struct{}
	news  atomic.Bool
	named atomic.Bool            // a message named owner since Named last ran
	woken atomic.Pointer[func()] // OnWake's f
}

// OnWake has f called, on the notifier's goroutine, after each wake-up
// of w (f must not block): for a driver whose step blocks on the server
// and must be told to return.
func (w *Waiter) OnWake(f func()) { w.woken.Store(&f) }

// Queue registers the queued waiter owner of the lock key lk.
func (n *Notifier) Queue(lk, owner string, wake chan<- struct{}) (*Waiter, error) {
	h, err := n.hub(lk, true)
	if err != nil {
		return nil, err
	}
	w := &Waiter{h: h, ch: lk + ChannelSuffix, owner: owner, wake: wake}
	h.add(w.ch, func(c *channel) { c.queued[owner] = w })
	h.add(h.inbox, func(c *channel) { c.queued[owner] = w })
	return w, nil
}

// Inbox returns the inbox channel on which releases may name w.
func (w *Waiter) Inbox() string { return w.h.inbox }

// InboxReady reports whether w's inbox is subscribed and confirmed: a
// message there reaches w.
func (w *Waiter) InboxReady() bool { return w.h.confirmed(w.h.inbox) }

// Ready reports whether w's subscriptions are confirmed.
func (w *Waiter) Ready() bool { return w.h.confirmed(w.ch) && w.h.confirmed(w.h.inbox) }

// News reports whether w was woken since the last call.
func (w *Waiter) News() bool { return w.news.Swap(false) }

// Named reports whether a message named w's owner since the last call: a
// hint that a release handed it the key (forgeable, as every message: the
// waiter still reads its grant on the server, and a forged one costs it a
// read).
func (w *Waiter) Named() bool { return w.named.Swap(false) }

// Stop unregisters w; it is woken no more.
func (w *Waiter) Stop() {
	w.h.remove(func(c *channel) {
		if c.queued[w.owner] == w {
			delete(c.queued, w.owner)
		}
	}, w.ch, w.h.inbox)
}

// signalNamed is signal for a message that named w's owner.
func (w *Waiter) signalNamed() {
	w.named.Store(true)
	w.signal()
}

func (w *Waiter) signal() {
	w.news.Store(true)
	select {
	case w.wake <- struct{}{}:
	default:
	}
	if f := w.woken.Load(); f != nil {
		(*f)()
	}
}

// hub returns the hub for the server holding lock key lk, starting it on
// first use if create is set (else nil).
func (n *Notifier) hub(lk string, create bool) (*hub, error) {
	var shard *redis.Client
	if r, ok := n.client.(*redis.Ring); ok {
		c, err := r.GetShardClientForKey(lk)
		if err != nil {
			return nil, err
		}
		shard = c
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, ErrNotifierClosed
	}
	h := n.hubs[shard]
	if h == nil && create {
		sub := func() *redis.PubSub { return n.client.Subscribe(n.ctx) }
		if shard != nil {
			sub = func() *redis.PubSub { return shard.Subscribe(n.ctx) }
		}
		h = newHub(n, sub, n.prefix+InboxInfix+NewInboxID())
		n.hubs[shard] = h
	}
	return h, nil
}

// Close ends the connections and waits for their goroutines.
func (n *Notifier) Close() {
	n.mu.Lock()
	n.closed = true
	hubs := n.hubs
	n.hubs = nil
	n.mu.Unlock()
	for _, h := range hubs {
		h.close()
	}
}

// hub is one pub/sub connection and the two goroutines that use it: the
// reader receives messages and checks the connection's health, the writer
// sends SUBSCRIBE and UNSUBSCRIBE, so that neither a waiter nor its removal
// ever waits on the network.
type hub struct {
	n         *Notifier
	newPubSub func() *redis.PubSub
	inbox     string
	pingEvery time.Duration
	poke      chan struct{} // wakes the writer
	done      chan struct{} // closed by close
	wg        sync.WaitGroup

	mu     sync.Mutex
	ps     *redis.PubSub
	gen    uint64 // counts connections: bumped when ps is replaced
	chans  map[string]*channel
	closed bool
}

// channel is the state of one channel on the current connection: a key's
// release channel, or the hub's inbox.
type channel struct {
	waiters map[chan struct{}]struct{} // Subscribe's
	queued  map[string]*Waiter         // Queue's, by owner
	// subscribed: the last command sent for this channel on the current
	// connection was SUBSCRIBE. pending: commands sent on it whose reply
	// has not come yet. The subscription is in force when subscribed and
	// nothing is pending, as the server answers in order.
	subscribed bool
	pending    int
	confirmed  bool
	ready      chan struct{} // closed when confirmed; a fresh one after
	reconnect  bool          // wake every waiter when confirmed again
	idleSince  time.Time     // when the last waiter left
}

func (c *channel) empty() bool { return len(c.waiters) == 0 && len(c.queued) == 0 }

func newHub(n *Notifier, newPubSub func() *redis.PubSub, inbox string) *hub {
	h := &hub{
		n:         n,
		newPubSub: newPubSub,
		inbox:     inbox,
		pingEvery: n.PingEvery,
		poke:      make(chan struct{}, 1),
		done:      make(chan struct{}),
		ps:        newPubSub(),
		chans:     map[string]*channel{},
	}
	h.wg.Add(2)
	go h.readLoop()
	go h.writeLoop()
	return h
}

// add registers a waiter on ch (reg adds it to the channel's state) and
// returns a channel closed once the subscription is confirmed, or nil if
// it already is.
func (h *hub) add(ch string, reg func(*channel)) <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.chans[ch]
	if c == nil {
		c = &channel{waiters: map[chan struct{}]struct{}{}, queued: map[string]*Waiter{}, ready: make(chan struct{})}
		h.chans[ch] = c
	}
	reg(c)
	if c.confirmed {
		return nil
	}
	if !c.subscribed {
		h.wakeWriter()
	}
	return c.ready
}

// remove unregisters a waiter (unreg removes it) from the channels chs;
// the writer unsubscribes a channel left without waiters after Linger.
func (h *hub) remove(unreg func(*channel), chs ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ch := range chs {
		if c := h.chans[ch]; c != nil {
			unreg(c)
			if c.empty() {
				c.idleSince = time.Now()
				h.wakeWriter()
			}
		}
	}
}

func (h *hub) confirmed(ch string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.chans[ch]
	return c != nil && c.confirmed
}

func (h *hub) wakeWriter() {
	select {
	case h.poke <- struct{}{}:
	default:
	}
}

// wakeLocked wakes the waiters of c: all of them, or, when owner is set,
// the Subscribe callers and owner's queued waiter.
func (c *channel) wakeLocked(owner string) {
	for w := range c.waiters {
		select {
		case w <- struct{}{}:
		default:
		}
	}
	if owner != "" {
		if w := c.queued[owner]; w != nil {
			w.signalNamed()
		}
		return
	}
	for _, w := range c.queued {
		w.signal()
	}
}

// writeLoop brings the subscriptions of the connection in line with the
// waiters.
func (h *hub) writeLoop() {
	defer h.wg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		select {
		case <-h.done:
			return
		case <-h.poke:
		case <-t.C:
		}
		ps, gen, sub, unsub, next := h.plan(time.Now())
		var err error
		if len(sub) > 0 {
			err = ps.Subscribe(h.n.ctx, sub...)
		}
		if err == nil && len(unsub) > 0 {
			err = ps.Unsubscribe(h.n.ctx, unsub...)
		}
		if err != nil {
			h.fail(gen)
		}
		t.Reset(next)
	}
}

// plan decides what the writer sends, and marks it sent.
func (h *hub) plan(now time.Time) (ps *redis.PubSub, gen uint64, sub, unsub []string, next time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	next = time.Hour
	for name, c := range h.chans {
		switch {
		case !c.empty() && !c.subscribed:
			sub = append(sub, name)
			c.subscribed = true
			c.pending++
		case c.empty() && c.subscribed:
			if idle := now.Sub(c.idleSince); idle < h.n.Linger {
				next = min(next, h.n.Linger-idle)
				continue
			}
			unsub = append(unsub, name)
			c.subscribed = false
			c.pending++
			if c.confirmed {
				c.confirmed = false
				c.ready = make(chan struct{})
			}
		case c.empty() && c.pending == 0:
			delete(h.chans, name)
		}
	}
	return h.ps, h.gen, sub, unsub, next
}

// readLoop receives on the current connection and replaces it when it
// fails, until close.
func (h *hub) readLoop() {
	defer h.wg.Done()
	delay := minRedial
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		h.mu.Lock()
		ps, gen, closed := h.ps, h.gen, h.closed
		h.mu.Unlock()
		if closed {
			return
		}
		if h.read(ps, gen) {
			delay = minRedial
		}
		t.Reset(delay)
		select {
		case <-h.done:
			return
		case <-t.C:
		}
		delay = min(2*delay, maxRedial)
		h.reconnect(gen)
	}
}

// read handles messages from ps until it fails, and reports whether it
// received anything. A connection silent for pingEvery is pinged, and
// given up if the pong does not come within pingEvery more.
func (h *hub) read(ps *redis.PubSub, gen uint64) (worked bool) {
	pinged := false
	for {
		msg, err := ps.ReceiveTimeout(h.n.ctx, h.pingEvery)
		if err != nil {
			var t interface{ Timeout() bool }
			if !errors.As(err, &t) || !t.Timeout() || pinged {
				return worked
			}
			ctx, cancel := context.WithTimeout(h.n.ctx, h.pingEvery)
			err = ps.Ping(ctx)
			cancel()
			if err != nil {
				return worked
			}
			pinged = true
			continue
		}
		worked, pinged = true, false
		switch m := msg.(type) {
		case *redis.Message:
			h.message(gen, m.Channel, m.Payload)
		case *redis.Subscription:
			h.answered(gen, m.Channel)
		}
	}
}

// Wake returns the channel and the payload of the message that wakes the
// waiters of the lock key lk: those of owner, queued with its Locker's
// inbox ("" when it has none), or, when owner is "", every waiter of lk.
// It is the one description of the wake-up message, which both Redis
// drivers publish (rediswatch with Wake; redisnx's scripts, in Lua, as
// prelude.lua says) and parseWake reads:
//
//	channel            payload  wakes
//	inbox              OWNER    OWNER's queued waiter alone
//	P{K}:rel           OWNER    OWNER's queued waiter (queued without an
//	                            inbox) and the waiters that do not queue
//	P{K}:rel           ""       every waiter of the key (no one was named)
//
// inbox is P + "inbox:" + 32 hex digits (see Notifier); OWNER is the
// owner token of the waiter's lease. Nothing in a message is trusted:
// anyone allowed to PUBLISH on the channels can send one, so a message
// only wakes, and the waiter's next request reads its grant on the server.
// Releases of older versions sent "OWNER TOKEN N [NEXT]" and took it as
// the grant: parseWake reads the first field alone.
func Wake(lk, owner, inbox string) (channel, payload string) {
	if owner == "" || inbox == "" {
		return lk + ChannelSuffix, owner
	}
	return inbox, owner
}

// parseWake returns the owner that a wake-up message's payload names, ""
// for no one (the format: see Wake).
func parseWake(payload string) (owner string) {
	owner, _, _ = strings.Cut(payload, " ")
	return owner
}

// message passes a message of ch (see Wake) to its waiters: on the inbox,
// to the named owner's queued waiter; on a key's channel, to the named
// owner's queued waiter and the waiters that do not queue, or to every
// waiter when it names no one.
func (h *hub) message(gen uint64, ch, payload string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.chans[ch]
	if c == nil || gen != h.gen {
		return
	}
	owner := parseWake(payload)
	switch {
	case ch != h.inbox:
		c.wakeLocked(owner)
	default:
		if w := c.queued[owner]; w != nil {
			w.signalNamed()
		}
	}
}

// answered takes the server's reply to a SUBSCRIBE or UNSUBSCRIBE of ch.
// A confirmation wakes the queued waiters (they queue, or retry, once in
// force), and every waiter after a reconnection.
func (h *hub) answered(gen uint64, ch string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.chans[ch]
	if c == nil || gen != h.gen {
		return
	}
	if c.pending > 0 {
		c.pending--
	}
	if c.pending == 0 && c.subscribed && !c.confirmed {
		c.confirmed = true
		close(c.ready)
		if c.reconnect {
			c.reconnect = false
			c.wakeLocked("")
		} else {
			for _, w := range c.queued {
				w.signal()
			}
		}
	}
}

// fail closes connection gen, which makes the reader replace it.
func (h *hub) fail(gen uint64) {
	h.mu.Lock()
	ps := h.ps
	ok := gen == h.gen && !h.closed
	h.mu.Unlock()
	if ok {
		_ = ps.Close()
	}
}

// reconnect replaces connection gen with a new one and has the writer
// subscribe again to every channel with waiters.
func (h *hub) reconnect(gen uint64) {
	h.mu.Lock()
	if h.closed || gen != h.gen {
		h.mu.Unlock()
		return
	}
	old := h.ps
	h.ps = h.newPubSub()
	h.gen++
	h.n.reconnects.Add(1)
	for name, c := range h.chans {
		if c.empty() {
			delete(h.chans, name)
			continue
		}
		c.subscribed, c.pending, c.reconnect = false, 0, true
		if c.confirmed {
			c.confirmed = false
			c.ready = make(chan struct{})
		}
	}
	h.mu.Unlock()
	_ = old.Close()
	h.wakeWriter()
}

// close ends the connection and waits for the goroutines.
func (h *hub) close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	ps := h.ps
	h.mu.Unlock()
	close(h.done)
	_ = ps.Close()
	h.wg.Wait()
}
