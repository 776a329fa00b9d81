package nemesis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The adversary of the postgres target: a role made with CreateUser that
// has no right on dlock's schema (no USAGE: it can read no table and call
// no function of it), as any role of the database is, yet may LISTEN and
// NOTIFY on any channel, the driver's included. Its waiters are woken by
// notifications on their Locker's channel (schema version 3: "dlock_"
// and 12 hex digits, kept in the waiter's entry) whose payload is the
// waiter's owner token, and a notification only wakes: the waiter's own
// step decides on the server. The adversary learns the channels (a
// role that reads the schema sees them: they are no secret; the harness
// reads them as the superuser every 300ms), listens to them and, at
// random moments, sends what it heard again (duplicated, replayed up to
// 3s later and as a series of stale copies, reordered), and forges
// wake-ups for the real waiters: those it heard of, and those lock.Inspect
// shows to a Locker of the application's role (owner tokens are what
// anyone who reads the lock state sees: they are no secret), and for the
// keys' holders, plus payloads that name no waiter (random tokens, a
// named owner's 16 digits, upper case, empty). Nothing it sends may make a
// waiter a holder while another holds the key. Now and then it also tries
// to call the driver's functions with the tokens it heard, which must be
// refused.

const (
	pgAdvUser     = "nemesis_adversary"
	pgAdvPassword = "nemesis-adversary-secret"
	pgAdvChannel  = "dlock"
)

// pgAdversary is the listener and forger; see above.
type pgAdversary struct {
	r    *run
	url  string // its own role's, to the server itself
	spy  Locker // the application's role, for Inspect
	pool *pgxpool.Pool
	stop chan struct{}
	wg   sync.WaitGroup

	mu      sync.Mutex
	rng     *rand.Rand
	recent  []string // payloads heard
	waiters []string // owner tokens of waiters heard of or inspected
	holders []string // owners of holders inspected
	held    []string // for a reordered burst
	window  time.Time
	inWin   int
	counts  map[string]int
	own     map[uint32]bool // the server processes of its own connections
	admin   *pgxpool.Pool   // the superuser's, to learn the Lockers' channels
	chans   []string        // the Lockers' channels learned
	chanOf  map[string]string
}

// startPGAdversary makes the role, checks what it may do, and starts
// listening and inspecting.
func (r *run) startPGAdversary() *pgAdversary {
	if r.srv.PG == nil {
		r.problem("adversary: no PostgreSQL server to make the role on")
		return nil
	}
	url, err := r.srv.PG.CreateUser(pgAdvUser, pgAdvPassword)
	if err != nil {
		r.problem("adversary: %v", err)
		return nil
	}
	spy, err := r.open(r.serverAddrs(), 30*time.Second)
	if err != nil {
		r.problem("adversary: open the inspecting Locker: %v", err)
		return nil
	}
	a := &pgAdversary{r: r, url: url, spy: spy, stop: make(chan struct{}),
		rng: rand.New(rand.NewPCG(r.cfg.Seed, 13)), counts: map[string]int{}, own: map[uint32]bool{}, chanOf: map[string]string{}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a.admin, err = pgxpool.New(ctx, r.srv.PG.URL())
	if err != nil {
		spy.Close()
		r.problem("adversary: %v", err)
		return nil
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err == nil {
		cfg.AfterConnect = func(_ context.Context, c *pgx.Conn) error {
			a.mu.Lock()
			a.own[c.PgConn().PID()] = true
			a.mu.Unlock()
			return nil
		}
		a.pool, err = pgxpool.NewWithConfig(ctx, cfg)
	}
	if err != nil {
		a.admin.Close()
		spy.Close()
		r.problem("adversary: %v", err)
		return nil
	}
	if err := a.checkRights(ctx); err != nil {
		a.pool.Close()
		a.admin.Close()
		spy.Close()
		r.problem("adversary: %v", err)
		return nil
	}
	a.wg.Add(2)
	go a.listen()
	go a.inspect()
	return a
}

// checkRights makes sure the role can notify on the driver's channel and
// can neither read its tables nor call its functions, once the schema
// exists (a TryLock through the application's role makes it).
func (a *pgAdversary) checkRights(ctx context.Context) error {
	l, err := a.spy.TryLock(ctx, "nemesis/adversary")
	if err != nil {
		return fmt.Errorf("a TryLock through the application's role (which makes the schema): %w", err)
	}
	if err := l.Unlock(ctx); err != nil {
		return fmt.Errorf("unlock nemesis/adversary: %w", err)
	}
	if _, err := a.pool.Exec(ctx, "SELECT pg_notify($1, '')", pgAdvChannel); err != nil {
		return fmt.Errorf("the role %s cannot notify: %w", pgAdvUser, err)
	}
	for _, q := range []string{"SELECT count(*) FROM dlock.entries", "SELECT count(*) FROM dlock.keys",
		"SELECT dlock.release3('nemesis', '0123456789abcdef0123456789abcdef', false, 1000, false)"} {
		if _, err := a.pool.Exec(ctx, q); !denied(err) {
			return fmt.Errorf("the role %s may run %q: it answered %v, want permission denied", pgAdvUser, q, err)
		}
	}
	return nil
}

// denied reports whether err is PostgreSQL's insufficient_privilege.
func denied(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42501"
}

// close stops the adversary: nothing more is sent once it returns.
func (a *pgAdversary) close() {
	if a == nil {
		return
	}
	close(a.stop)
	a.wg.Wait()
	a.pool.Close()
	a.admin.Close()
	a.spy.Close()
}

// Counts returns what the adversary heard and sent, by kind.
func (a *pgAdversary) Counts() map[string]int {
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

// listen keeps a LISTEN connection until stop, making a new one when it
// breaks (a server restarted, paused past the read).
func (a *pgAdversary) listen() {
	defer a.wg.Done()
	for i := 0; !closed(a.stop); i++ {
		if i > 0 {
			a.count("reconnect")
			sleepOrStop(200*time.Millisecond, a.stop)
		}
		a.session()
	}
}

// session listens on one connection until it fails or stop.
func (a *pgAdversary) session() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	c, err := pgx.Connect(ctx, a.url)
	cancel()
	if err != nil {
		return
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c.Close(ctx)
		cancel()
	}()
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	_, err = c.Exec(ctx, `LISTEN "`+pgAdvChannel+`"`)
	cancel()
	if err != nil {
		return
	}
	listening := map[string]bool{}
	for !closed(a.stop) {
		if !a.listenNew(c, listening) {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		n, err := c.WaitForNotification(ctx)
		cancel()
		var t interface{ Timeout() bool }
		switch {
		case err == nil:
			a.heard(n.PID, n.Channel, n.Payload)
		case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &t) && t.Timeout():
			if c.IsClosed() {
				return
			}
			a.tick()
		default:
			return
		}
	}
}

// listenNew LISTENs on c to the channels learned that it does not
// listen to yet; false when c failed.
func (a *pgAdversary) listenNew(c *pgx.Conn, listening map[string]bool) bool {
	a.mu.Lock()
	chans := slices.Clone(a.chans)
	a.mu.Unlock()
	for _, ch := range chans {
		if listening[ch] {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.Exec(ctx, `LISTEN "`+ch+`"`)
		cancel()
		if err != nil {
			return false
		}
		listening[ch] = true
	}
	return true
}

// learnChannels reads the channels of the waiters queued, and which
// waiter each one wakes.
func (a *pgAdversary) learnChannels() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	rows, err := a.admin.Query(ctx, "SELECT owner, chan FROM dlock.entries WHERE chan <> ''")
	if err != nil {
		a.count("channels-failed")
		return
	}
	defer rows.Close()
	for rows.Next() {
		var owner, ch string
		if rows.Scan(&owner, &ch) != nil {
			return
		}
		a.mu.Lock()
		if _, ok := a.chanOf[owner]; !ok && len(a.chanOf) > 10*advRecent {
			clear(a.chanOf)
		}
		a.chanOf[owner] = ch
		if !slices.Contains(a.chans, ch) {
			a.chans = append(a.chans, ch)
			a.counts["channel-learned"]++
		}
		a.mu.Unlock()
	}
}

// channelLocked is where a wake-up for payload goes: the channel of its
// waiter's Locker if known, another Locker's at random, or the channel of
// schema version 2.
func (a *pgAdversary) channelLocked(payload string) string {
	if ch, ok := a.chanOf[payload]; ok && a.rng.IntN(4) != 0 {
		return ch
	}
	if len(a.chans) == 0 {
		return pgAdvChannel
	}
	return a.chans[a.rng.IntN(len(a.chans))]
}

// inspect learns the owner tokens of the hot keys' waiters and holders,
// through the application's role, and the Lockers' channels, every
// 300ms, and now and then forges a wake-up for one of the waiters it
// found at once.
func (a *pgAdversary) inspect() {
	defer a.wg.Done()
	every(300*time.Millisecond, a.stop, func() {
		a.learnChannels()
		for _, key := range a.r.env.keys {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			st, err := a.spy.Inspect(ctx, key)
			cancel()
			if err != nil {
				a.count("inspect-failed")
				continue
			}
			a.mu.Lock()
			for _, w := range st.Waiters {
				a.learnLocked(&a.waiters, w.Owner)
			}
			for _, h := range st.Holders {
				a.learnLocked(&a.holders, h.Owner)
			}
			if len(st.Waiters) > 0 && a.rng.IntN(3) == 0 {
				w := st.Waiters[a.rng.IntN(len(st.Waiters))]
				a.sendLocked(0, w.Owner, "forge-inspected")
			}
			a.mu.Unlock()
		}
	})
}

func (a *pgAdversary) learnLocked(list *[]string, owner string) {
	*list = append(*list, owner)
	if len(*list) > advRecent {
		*list = (*list)[1:]
	}
}

// heard remembers a wake-up and, at random, acts on it; its own
// notifications (sent by a server process of its pool) are only counted.
func (a *pgAdversary) heard(pid uint32, channel, payload string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.own[pid] {
		a.counts["heard-own"]++
		return
	}
	if payload != "" && channel != pgAdvChannel {
		a.chanOf[payload] = channel
	}
	a.counts["heard"]++
	a.recent = append(a.recent, payload)
	if len(a.recent) > advRecent {
		a.recent = a.recent[1:]
	}
	if payload != "" {
		a.learnLocked(&a.waiters, payload)
	}
	switch x := a.rng.Float64(); {
	case x < 0.1:
		a.sendLocked(0, payload, "duplicate")
	case x < 0.2:
		a.sendLocked(a.delayLocked(), payload, "replay")
	case x < 0.27:
		a.held = append(a.held, payload)
		if len(a.held) == 3 {
			for i := len(a.held) - 1; i >= 0; i-- {
				a.sendLocked(time.Duration(2-i)*time.Millisecond, a.held[i], "reorder")
			}
			a.held = nil
		}
	case x < 0.6:
		a.mutateLocked(payload)
	case x < 0.63:
		a.callLocked(payload)
	}
	if a.rng.IntN(8) == 0 {
		// Stale copies, every 300ms or so from 0.4s to 2.5s after it: the
		// waiter woken may be waiting again by then.
		for i := range 8 {
			d := 400*time.Millisecond + time.Duration(i)*300*time.Millisecond + time.Duration(a.rng.Int64N(int64(50*time.Millisecond)))
			a.sendLocked(d, payload, "stale")
		}
	}
}

// tick, when nothing was heard for a while: at random, a wake-up heard
// before sent again, or one forged for a waiter known.
func (a *pgAdversary) tick() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.rng.IntN(3) != 0 {
		return
	}
	if len(a.recent) > 0 && a.rng.IntN(2) == 0 {
		a.sendLocked(0, a.recent[a.rng.IntN(len(a.recent))], "replay-old")
		return
	}
	a.mutateLocked("")
}

// mutateLocked sends a forgery: a wake-up for another waiter (heard of or
// inspected), for a holder, or a payload that names no waiter.
func (a *pgAdversary) mutateLocked(payload string) {
	d := a.delayLocked() / 2
	switch x := a.rng.IntN(8); {
	case x < 3 && len(a.waiters) > 0:
		// A burst for one waiter, 0 to 50ms apart.
		w := a.waiters[a.rng.IntN(len(a.waiters))]
		var at time.Duration
		for range 1 + a.rng.IntN(4) {
			at += time.Duration(a.rng.Int64N(int64(50 * time.Millisecond)))
			a.sendLocked(at, w, "forge-other")
		}
	case x == 3 && len(a.holders) > 0:
		a.sendLocked(d, a.holders[a.rng.IntN(len(a.holders))], "forge-holder")
	case x == 4:
		a.sendLocked(d, fmt.Sprintf("%016x%016x", a.rng.Uint64(), a.rng.Uint64()), "forge-random")
	case x == 5 && len(payload) >= 16:
		a.sendLocked(d, payload[:16], "forge-named")
	case x == 6 && payload != "":
		a.sendLocked(d, strings.ToUpper(payload), "forge-upper")
	default:
		a.sendLocked(d, "", "forge-empty")
	}
}

// callLocked tries, as the role, to take or end the grant of a waiter
// heard of, on a hot key: the role has no right on the schema, so the
// server must refuse (a harness problem otherwise).
func (a *pgAdversary) callLocked(owner string) {
	key := a.r.env.keys[a.rng.IntN(len(a.r.env.keys))]
	q, kind := "SELECT dlock.release3($1, $2, false, 1000, false)", "call-release"
	if a.rng.IntN(2) == 0 {
		q, kind = "SELECT dlock.check_turn3($1, $2, 0, 0, 1000000, 3000000, '')", "call-check"
	}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := a.pool.Exec(ctx, q, key, owner)
		cancel()
		switch {
		case denied(err):
			a.count(kind + "-refused")
		case err == nil:
			a.r.problem("adversary: the role %s ran %s for owner %s on %q: its rights are not what the run assumes", pgAdvUser, q, owner, key)
		default:
			a.count(kind + "-failed")
		}
	}()
}

func (a *pgAdversary) delayLocked() time.Duration {
	return time.Duration(a.rng.Int64N(int64(advMaxDelay)))
}

// sendLocked notifies payload after d, counted as kind, unless the rate
// is spent or the adversary stops first.
func (a *pgAdversary) sendLocked(d time.Duration, payload, kind string) {
	if now := time.Now(); now.Sub(a.window) >= time.Second {
		a.window, a.inWin = now, 0
	}
	if a.inWin >= advMaxRate {
		a.counts["skipped"]++
		return
	}
	a.inWin++
	channel := a.channelLocked(payload)
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		if d > 0 {
			sleepOrStop(d, a.stop)
		}
		if closed(a.stop) {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := a.pool.Exec(ctx, "SELECT pg_notify($1, $2)", channel, payload)
		cancel()
		if err != nil {
			kind = "publish-failed"
		} else {
			a.r.rec.Event(Event{At: a.r.clk.Now(), Kind: "adversary", Key: "~pubsub", Text: kind + " " + channel + " " + payload})
		}
		a.count(kind)
	}()
}

func (a *pgAdversary) count(kind string) {
	a.mu.Lock()
	a.counts[kind]++
	a.mu.Unlock()
}
