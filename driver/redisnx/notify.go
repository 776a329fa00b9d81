package redisnx

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Waiters of a Locker share one pub/sub connection (one per shard for a
// Ring), held by a hub. A hub subscribes to a key's release channel while
// some waiter waits on that key, and a little longer (linger), so that a
// busy key is not subscribed and unsubscribed for every waiter.
//
// Subscribe returns once the server has confirmed the subscription, so that
// the retry lock makes right after it cannot miss a release. After the
// connection was lost and made again, every waiter is woken once, when its
// channel is confirmed again: a release it missed meanwhile is found by that
// retry.
const (
	confirmWait = 250 * time.Millisecond // longest wait for a confirmation
	linger      = 2 * time.Second        // unsubscribe after this long unused
	minRedial   = 50 * time.Millisecond  // backoff after a failed connection
	maxRedial   = 2 * time.Second
)

// pingEvery is how long a pub/sub connection may be silent before it is
// pinged, and how long the pong may take. A variable for tests; each hub
// keeps the value it started with.
var pingEvery = 5 * time.Second

var errNotifierClosed = errors.New("redisnx: notifier closed")

// notifier holds the hubs of one Locker.
type notifier struct {
	d      *redisDriver
	mu     sync.Mutex
	hubs   map[*redis.Client]*hub // by Ring shard; nil key for other clients
	closed bool
}

func newNotifier(d *redisDriver) *notifier {
	return &notifier{d: d, hubs: map[*redis.Client]*hub{}}
}

// Subscribe implements driver.Notifier.
func (d *redisDriver) Subscribe(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	lk := lockKey(d.prefix, key)
	h, err := d.notify.hub(lk)
	if err != nil {
		return nil, nil, err
	}
	ch := lk + channelSuffix
	w := make(chan struct{}, 1)
	ready := h.add(ch, w)
	var once sync.Once
	cancel := func() { once.Do(func() { h.remove(ch, w) }) }
	if ready != nil {
		t := time.NewTimer(confirmWait)
		defer t.Stop()
		select {
		case <-ready:
		case <-t.C:
			// Not confirmed yet: wait anyway. A release before the
			// subscription takes effect is found by lock's next retry,
			// at the holder's expiry or the retry strategy's next step.
		case <-ctx.Done():
			cancel()
			return nil, nil, ctx.Err()
		case <-h.done:
			cancel()
			return nil, nil, errNotifierClosed
		}
	}
	return w, cancel, nil
}

// hub returns the hub for the server holding lock key lk, starting it on
// first use.
func (n *notifier) hub(lk string) (*hub, error) {
	var shard *redis.Client
	if n.d.topo == ring {
		c, err := n.d.client.(*redis.Ring).GetShardClientForKey(lk)
		if err != nil {
			return nil, err
		}
		shard = c
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, errNotifierClosed
	}
	h := n.hubs[shard]
	if h == nil {
		var sub func() *redis.PubSub
		if shard != nil {
			sub = func() *redis.PubSub { return shard.Subscribe(context.Background()) }
		} else {
			sub = func() *redis.PubSub { return n.d.client.Subscribe(context.Background()) }
		}
		h = newHub(sub, n.d.prefix+inboxInfix+newInboxID())
		n.hubs[shard] = h
	}
	return h, nil
}

func (n *notifier) close() {
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
// sends SUBSCRIBE and UNSUBSCRIBE, so that neither Subscribe nor its cancel
// ever waits on the network.
type hub struct {
	newPubSub func() *redis.PubSub
	// inbox is the channel on which this hub's queued waiters are handed
	// keys ("OWNER TOKEN"): a hand-over reaches this connection alone,
	// not every Locker subscribed to the key's release channel.
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
	// queued are AcquireWait's waiters, by owner, each registered on its
	// key's release channel and on the inbox. A hand-over on the inbox
	// ("OWNER TOKEN") is sent to its owner alone, with the token; other
	// news (a release with no one queued, a reconnection) to all, as 0.
	queued map[string]chan uint64
	// subscribed: the last command sent for this channel on the current
	// connection was SUBSCRIBE. pending: commands sent on it whose reply
	// has not come yet. The subscription is in force when subscribed and
	// nothing is pending, as the server answers in order.
	subscribed bool
	pending    int
	confirmed  bool
	ready      chan struct{} // closed when confirmed; a fresh one after
	wakeOnConf bool          // wake the waiters when confirmed (reconnected)
	idleSince  time.Time     // when the last waiter left
}

func (c *channel) empty() bool { return len(c.waiters) == 0 && len(c.queued) == 0 }

func newHub(newPubSub func() *redis.PubSub, inbox string) *hub {
	h := &hub{
		newPubSub: newPubSub,
		inbox:     inbox,
		pingEvery: pingEvery,
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

// add registers waiter w on ch and returns a channel closed once the
// subscription is confirmed, or nil if it already is.
func (h *hub) add(ch string, w chan struct{}) <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.channelLocked(ch)
	c.waiters[w] = struct{}{}
	return h.readyLocked(c)
}

// confirmed reports whether ch and the inbox are subscribed and confirmed.
func (h *hub) confirmed(ch string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	c, in := h.chans[ch], h.chans[h.inbox]
	return c != nil && c.confirmed && in != nil && in.confirmed
}

// addQueued registers the queued waiter owner on the release channel ch
// and on the inbox: the returned channel receives the token named by a
// hand-over message for owner (a wake-up only: the waiter verifies it on
// the server), and 0 on other news. The other results are closed once
// the subscriptions of ch and of the inbox are confirmed, or nil if they
// are.
func (h *hub) addQueued(ch, owner string) (w chan uint64, readyCh, readyInbox <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w = make(chan uint64, 1)
	c := h.channelLocked(ch)
	c.queued[owner] = w
	in := h.channelLocked(h.inbox)
	in.queued[owner] = w
	return w, h.readyLocked(c), h.readyLocked(in)
}

func (h *hub) channelLocked(ch string) *channel {
	c := h.chans[ch]
	if c == nil {
		c = &channel{waiters: map[chan struct{}]struct{}{}, queued: map[string]chan uint64{}, ready: make(chan struct{})}
		h.chans[ch] = c
	}
	return c
}

func (h *hub) readyLocked(c *channel) <-chan struct{} {
	if c.confirmed {
		return nil
	}
	if !c.subscribed {
		h.wakeWriter()
	}
	return c.ready
}

// remove unregisters waiter w; the writer unsubscribes after linger.
func (h *hub) remove(ch string, w chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c := h.chans[ch]; c != nil {
		delete(c.waiters, w)
		h.leftLocked(c)
	}
}

// removeQueued unregisters the queued waiter owner.
func (h *hub) removeQueued(ch, owner string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, name := range []string{ch, h.inbox} {
		if c := h.chans[name]; c != nil {
			delete(c.queued, owner)
			h.leftLocked(c)
		}
	}
}

func (h *hub) leftLocked(c *channel) {
	if c.empty() {
		c.idleSince = time.Now()
		h.wakeWriter()
	}
}

func (h *hub) wakeWriter() {
	select {
	case h.poke <- struct{}{}:
	default:
	}
}

// wakeLocked wakes every waiter of c.
func (c *channel) wakeLocked() {
	for w := range c.waiters {
		select {
		case w <- struct{}{}:
		default:
		}
	}
	for _, w := range c.queued {
		send(w, 0)
	}
}

// send puts v in w without blocking: a token replaces a 0 waiting there.
// Only the hub sends, under its lock, so the second attempt cannot fail
// but for a token already there, which stays.
func send(w chan uint64, v uint64) {
	select {
	case w <- v:
		return
	default:
	}
	if v == 0 {
		return
	}
	select {
	case old := <-w:
		if old != 0 {
			v = old
		}
	default:
	}
	select {
	case w <- v:
	default:
	}
}

// handOverLocked takes a message of the inbox, "OWNER TOKEN": the key was
// handed to that owner's waiter, which gets the token.
func (c *channel) handOverLocked(payload string) {
	owner, tok, _ := strings.Cut(payload, " ")
	if w := c.queued[owner]; w != nil {
		if n, err := strconv.ParseUint(tok, 10, 64); err == nil && n > 0 {
			send(w, n)
		} else {
			send(w, 0)
		}
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
			err = ps.Subscribe(context.Background(), sub...)
		}
		if err == nil && len(unsub) > 0 {
			err = ps.Unsubscribe(context.Background(), unsub...)
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
			if idle := now.Sub(c.idleSince); idle < linger {
				next = min(next, linger-idle)
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
		msg, err := ps.ReceiveTimeout(context.Background(), h.pingEvery)
		if err != nil {
			if !isTimeout(err) || pinged {
				return worked
			}
			ctx, cancel := context.WithTimeout(context.Background(), h.pingEvery)
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
			h.released(gen, m.Channel, m.Payload)
		case *redis.Subscription:
			h.answered(gen, m.Channel)
		}
	}
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// released passes a message of ch to its waiters.
func (h *hub) released(gen uint64, ch, payload string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.chans[ch]
	switch {
	case c == nil || gen != h.gen:
	case ch == h.inbox:
		c.handOverLocked(payload)
	default:
		c.wakeLocked()
	}
}

// answered takes the server's reply to a SUBSCRIBE or UNSUBSCRIBE of ch.
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
		if c.wakeOnConf {
			c.wakeOnConf = false
			c.wakeLocked()
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
// subscribe again to every channel with waiters, who are woken once
// their channel is confirmed: they may have missed a release meanwhile.
func (h *hub) reconnect(gen uint64) {
	h.mu.Lock()
	if h.closed || gen != h.gen {
		h.mu.Unlock()
		return
	}
	old := h.ps
	h.ps = h.newPubSub()
	h.gen++
	for name, c := range h.chans {
		if c.empty() {
			delete(h.chans, name)
			continue
		}
		c.subscribed, c.pending, c.wakeOnConf = false, 0, true
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
