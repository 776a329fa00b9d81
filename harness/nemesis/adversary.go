package nemesis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock/harness/chaos"
	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/redis/go-redis/v9"
)

// The adversary, on the targets whose waiters listen on Redis pub/sub
// (Target.Notify): a client of the backend with pub/sub rights only, an
// ACL user allowed SUBSCRIBE, PSUBSCRIBE and PUBLISH on the dlock channels
// and nothing else (no key), as anyone who may listen to the locks'
// notifications is. It subscribes to every dlock channel ("dlock:*": the
// keys' release channels and the Lockers' inboxes) and, at random moments,
// publishes what it heard again: duplicated at once, replayed later (a
// hand-over, as a series of stale copies over 2.6s), in reverse order, or
// mutated (the token and the run number up and down, a
// message for one waiter sent to another whose owner and inbox it heard
// of, a hand-over forged for the waiter a hand-over names next, or for a
// waiter a wake-up named). The messages' format is the drivers' (see
// redisx.Waiter.HandedOver): "OWNER", "OWNER TOKEN N [NEXT]", or "".
// Nothing it sends may be taken as a grant while another holds the key.

const (
	advPattern  = "dlock:*"
	advUser     = "nemesis-adversary"
	advMaxRate  = 100 // publishes a second, at most
	advRecent   = 64  // messages remembered
	advMaxDelay = 3 * time.Second
)

// adversary is the listener and forger; see above.
type adversary struct {
	r     *run
	nodes []string
	pass  string
	stop  chan struct{}
	wg    sync.WaitGroup

	mu      sync.Mutex
	rng     *rand.Rand
	recent  []heard
	waiters []heard // owner (payload) and inbox (ch) of waiters heard of
	held    []heard // for a reordered burst
	window  time.Time
	inWin   int
	counts  map[string]int
	pub     *redis.Client
}

// heard is a message: its channel and payload.
type heard struct{ ch, payload string }

// advRunner is a running adversary: the Redis one (this file) or the
// PostgreSQL one (adversary_pg.go). Both methods work on a nil one.
type advRunner interface {
	close()
	Counts() map[string]int
}

// startAdversary starts the adversary of the target's backend; nil when
// the target has no notifications or the run no faults.
func (r *run) startAdversary() advRunner {
	if r.tg.etcdAuth && !r.cfg.NoFaults && (len(r.cfg.Faults) == 0 || slices.Contains(r.cfg.Faults, "adversary")) {
		return r.startEtcdAdversary()
	}
	if !r.tg.Notify || r.cfg.NoFaults || r.srv == nil {
		return (*adversary)(nil)
	}
	if len(r.cfg.Faults) > 0 && !slices.Contains(r.cfg.Faults, "adversary") {
		return (*adversary)(nil) // a run limited to some faults, the adversary not among them
	}
	if r.tg.Backend == chaos.PostgresBackend {
		return r.startPGAdversary()
	}
	return r.startRedisAdversary()
}

// startRedisAdversary makes the ACL user on every server and starts
// listening.
func (r *run) startRedisAdversary() *adversary {
	a := &adversary{r: r, nodes: r.srv.Addrs, pass: fmt.Sprintf("p%d", r.cfg.Seed), stop: make(chan struct{}),
		rng: rand.New(rand.NewPCG(r.cfg.Seed, 11)), counts: map[string]int{}}
	for _, addr := range a.nodes {
		if err := a.ensureUser(addr); err != nil {
			r.problem("adversary: %v", err)
			return nil
		}
	}
	if err := a.checkRights(); err != nil {
		r.problem("adversary: %v", err)
		return nil
	}
	a.wg.Add(1)
	go a.listen()
	return a
}

// ensureUser makes (again: a restarted server forgot it) the adversary's
// ACL user on addr, through the default user.
func (a *adversary) ensureUser(addr string) error {
	admin := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true, MaxRetries: -1})
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := admin.ACLSetUser(ctx, advUser, "reset", "on", ">"+a.pass, "resetchannels", "&"+advPattern, "-@all",
		"+psubscribe", "+subscribe", "+punsubscribe", "+unsubscribe", "+publish", "+ping", "+hello", "+auth").Err()
	if err != nil {
		return fmt.Errorf("ACL SETUSER on %s: %w", addr, err)
	}
	return nil
}

func (a *adversary) client(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, Username: advUser, Password: a.pass, DisableIdentity: true, MaxRetries: -1})
}

// checkRights makes sure the user can publish and cannot read a key.
func (a *adversary) checkRights() error {
	c := a.client(a.nodes[0])
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Publish(ctx, "dlock:nemesis", "").Err(); err != nil {
		return fmt.Errorf("the pub/sub user cannot publish: %w", err)
	}
	if err := c.Get(ctx, "dlock:{nemesis}").Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		return fmt.Errorf("the pub/sub user may read keys: GET answered %v", err)
	}
	return nil
}

// close stops the adversary: nothing more is published once it returns.
func (a *adversary) close() {
	if a == nil {
		return
	}
	close(a.stop)
	a.wg.Wait()
	a.mu.Lock()
	if a.pub != nil {
		a.pub.Close()
	}
	a.mu.Unlock()
}

// Counts returns what the adversary heard and sent, by kind.
func (a *adversary) Counts() map[string]int {
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

// listen subscribes to every dlock channel on one server (a Cluster
// passes every message to each node) and acts on what it hears, until
// stop; a failed connection is made again, to the next server.
func (a *adversary) listen() {
	defer a.wg.Done()
	for i := 0; !closed(a.stop); i++ {
		addr := a.nodes[i%len(a.nodes)]
		if i > 0 {
			a.count("reconnect")
			sleepOrStop(200*time.Millisecond, a.stop)
			if err := a.ensureUser(addr); err != nil {
				continue // the server is down: the next one
			}
		}
		a.session(addr)
	}
}

// session listens on one connection until it fails or stop.
func (a *adversary) session(addr string) {
	c := a.client(addr)
	defer c.Close()
	a.mu.Lock()
	if a.pub != nil {
		a.pub.Close()
	}
	a.pub = a.client(addr)
	a.mu.Unlock()
	ctx := context.Background()
	ps := c.PSubscribe(ctx, advPattern)
	defer ps.Close()
	for !closed(a.stop) {
		msg, err := ps.ReceiveTimeout(ctx, 200*time.Millisecond)
		var t interface{ Timeout() bool }
		switch {
		case errors.As(err, &t) && t.Timeout():
			a.tick()
		case err != nil:
			return
		default:
			if m, ok := msg.(*redis.Message); ok {
				a.heard(heard{m.Channel, m.Payload})
			}
		}
	}
}

// heard remembers a message and, at random, acts on it.
func (a *adversary) heard(h heard) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.counts["heard"]++
	a.recent = append(a.recent, h)
	if len(a.recent) > advRecent {
		a.recent = a.recent[1:]
	}
	a.learnLocked(h)
	if strings.Count(h.payload, " ") >= 2 {
		// A hand-over, in the history: a lease with its token came from
		// it, on time or late, or from a copy.
		a.r.rec.Event(Event{At: a.r.clk.Now(), Kind: "heard", Key: "~pubsub", Text: h.ch + " " + h.payload})
	}
	switch x := a.rng.Float64(); {
	case x < 0.1:
		a.sendLocked(0, h, "duplicate")
	case x < 0.2:
		a.sendLocked(a.delayLocked(), h, "replay")
	case x < 0.27:
		a.held = append(a.held, h)
		if len(a.held) == 3 {
			for i := len(a.held) - 1; i >= 0; i-- {
				a.sendLocked(time.Duration(2-i)*time.Millisecond, a.held[i], "reorder")
			}
			a.held = nil
		}
	case x < 0.6:
		a.mutateLocked(h)
	}
	if f := strings.Fields(h.payload); len(f) >= 3 && a.rng.IntN(8) == 0 {
		a.staleLocked(h, f)
	}
	a.pushLocked(h) // adversary_push.go
}

// staleLocked replays a hand-over as a stale one, for a waiter of the
// same Lock call that waits again after giving a late grant up: a copy
// every 300ms or so from 0.4s to 2.5s after it, with its own run number
// and with 1, by turns.
func (a *adversary) staleLocked(h heard, f []string) {
	n := f[2]
	for i := range 8 {
		d := 400*time.Millisecond + time.Duration(i)*300*time.Millisecond + time.Duration(a.rng.Int64N(int64(50*time.Millisecond)))
		f[2] = n
		if i%2 == 1 {
			f[2] = "1"
		}
		a.sendLocked(d, heard{h.ch, strings.Join(f, " ")}, "stale")
	}
}

// tick, when nothing was heard for a while: at random, a message heard
// before, sent again as it was or mutated.
func (a *adversary) tick() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.recent) == 0 || a.rng.IntN(3) != 0 {
		return
	}
	h := a.recent[a.rng.IntN(len(a.recent))]
	if a.rng.IntN(2) == 0 {
		a.sendLocked(0, h, "replay-old")
		return
	}
	a.mutateLocked(h)
}

// learnLocked notes the waiters a message names: the owner a wake-up or
// a hand-over sends to an inbox, and the next waiter a hand-over names.
func (a *adversary) learnLocked(h heard) {
	f := strings.Fields(h.payload)
	if len(f) >= 1 && strings.Contains(h.ch, redisx.InboxInfix) {
		a.waiterLocked(heard{h.ch, f[0]})
	}
	if len(f) >= 5 && strings.Contains(f[4], redisx.InboxInfix) {
		a.waiterLocked(heard{f[4], f[3]})
	}
}

func (a *adversary) waiterLocked(w heard) {
	a.waiters = append(a.waiters, w)
	if len(a.waiters) > advRecent {
		a.waiters = a.waiters[1:]
	}
}

func (a *adversary) delayLocked() time.Duration {
	return time.Duration(a.rng.Int64N(int64(advMaxDelay)))
}

// mutateLocked sends one mutation of h. A hand-over ("OWNER TOKEN N
// [NEXT]") gets its token or its run number moved, is sent to another
// waiter, or is forged for the waiter it names next; a wake-up ("OWNER"
// on an inbox) is made a hand-over. The forgeries for another waiter go
// as a burst of run numbers 1 to 4, one of which may be the waiter's.
func (a *adversary) mutateLocked(h heard) {
	f := strings.Fields(h.payload)
	tok, n := uint64(1), uint64(1)
	if len(f) >= 3 {
		tok, _ = strconv.ParseUint(f[1], 10, 64)
		n, _ = strconv.ParseUint(f[2], 10, 64)
	}
	d := a.delayLocked() / 2
	switch x := a.rng.IntN(6); {
	case len(f) >= 3 && x == 0:
		f[1] = strconv.FormatUint(max(1, tok+uint64(a.rng.IntN(3))+1), 10)
		a.sendLocked(d, heard{h.ch, strings.Join(f, " ")}, "token-up")
	case len(f) >= 3 && x == 1:
		f[1] = strconv.FormatUint(max(1, tok-1), 10)
		a.sendLocked(d, heard{h.ch, strings.Join(f, " ")}, "token-down")
	case len(f) >= 3 && x == 2:
		f[2] = strconv.FormatUint(n+1, 10)
		a.sendLocked(d, heard{h.ch, strings.Join(f, " ")}, "n-up")
	case len(f) >= 3 && x == 3:
		f[2] = strconv.FormatUint(max(1, n-1), 10)
		a.sendLocked(d, heard{h.ch, strings.Join(f, " ")}, "n-down")
	case len(f) >= 4 && x == 4:
		// The waiter named next: NEXT is its owner, and its inbox if any
		// (the key's channel, where h came, if none).
		to := heard{h.ch, f[3]}
		if len(f) >= 5 {
			to.ch = f[4]
		}
		a.forgeLocked(to, tok+1, "forge-next")
	case len(a.waiters) > 0 && x >= 4:
		w := a.waiters[a.rng.IntN(len(a.waiters))]
		a.forgeLocked(w, tok+uint64(a.rng.IntN(3)), "forge-other")
	case len(f) >= 1:
		a.forgeLocked(heard{h.ch, f[0]}, tok+1, "forge-self")
	}
}

// forgeLocked sends waiter w (owner in payload, on channel ch) hand-overs
// with token tok and run numbers 1 to 4, in random order, 0 to 50ms apart.
func (a *adversary) forgeLocked(w heard, tok uint64, kind string) {
	var d time.Duration
	for _, n := range a.rng.Perm(4) {
		d += time.Duration(a.rng.Int64N(int64(50 * time.Millisecond)))
		a.sendLocked(d, heard{w.ch, fmt.Sprintf("%s %d %d", w.payload, max(tok, 1), n+1)}, kind)
	}
}

// sendLocked publishes h after d, counted as kind, unless the rate is
// spent or the adversary stops first.
func (a *adversary) sendLocked(d time.Duration, h heard, kind string) {
	if now := time.Now(); now.Sub(a.window) >= time.Second {
		a.window, a.inWin = now, 0
	}
	if a.inWin >= advMaxRate {
		a.counts["skipped"]++
		return
	}
	a.inWin++
	pub := a.pub
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		if d > 0 {
			sleepOrStop(d, a.stop)
		}
		if closed(a.stop) || pub == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := pub.Publish(ctx, h.ch, h.payload).Err()
		cancel()
		if err != nil {
			kind = "publish-failed"
		} else {
			// In the history (under no key of the run's, so that the
			// excerpts printed with violations leave it out): what was
			// sent, to tell a forgery from a late message.
			a.r.rec.Event(Event{At: a.r.clk.Now(), Kind: "adversary", Key: "~pubsub", Text: kind + " " + h.ch + " " + h.payload})
		}
		a.count(kind)
	}()
}

func (a *adversary) count(kind string) {
	a.mu.Lock()
	a.counts[kind]++
	a.mu.Unlock()
}
