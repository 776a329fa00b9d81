package redisacl

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// PubSubUser makes an ACL user on admin's server that may only subscribe
// (SUBSCRIBE, PSUBSCRIBE) and PUBLISH on the channels that start with
// prefix, besides making its connection (HELLO, AUTH, PING), deleted at
// cleanup, and returns a client of it, closed at cleanup. It fails tb
// unless the user is refused a read of a key under prefix, so that a test
// that passes with it means something.
func PubSubUser(tb testing.TB, admin *redis.Client, prefix string) *redis.Client {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	user, pass := "pubsub-"+randHex(4), randHex(12)
	rules := []string{"reset", "on", ">" + pass, "resetkeys", "resetchannels", "&" + prefix + "*",
		"-@all", "+hello", "+auth", "+ping", "+subscribe", "+psubscribe", "+unsubscribe", "+punsubscribe", "+publish"}
	if err := admin.ACLSetUser(ctx, user, rules...).Err(); err != nil {
		tb.Fatalf("ACL SETUSER: %v", err)
	}
	opt := *admin.Options()
	opt.Username, opt.Password, opt.DisableIdentity = user, pass, true
	c := redis.NewClient(&opt)
	tb.Cleanup(func() {
		c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		admin.ACLDelUser(ctx, user)
	})
	if err := c.Get(ctx, prefix+"anything").Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		tb.Fatalf("GET as the pub/sub user: err = %v, want NOPERM", err)
	}
	return c
}

// An Eavesdropper listens on every channel under a prefix and keeps the
// messages it hears.
type Eavesdropper struct {
	mu    sync.Mutex
	heard []*redis.Message
}

// Listen has c listen on every channel that starts with prefix until
// cleanup, once its PSUBSCRIBE is confirmed.
func Listen(tb testing.TB, c *redis.Client, prefix string) *Eavesdropper {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ps := c.PSubscribe(ctx, prefix+"*")
	if _, err := ps.Receive(ctx); err != nil {
		tb.Fatalf("PSUBSCRIBE: %v", err)
	}
	e := &Eavesdropper{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m := range ps.Channel() {
			e.mu.Lock()
			e.heard = append(e.heard, m)
			e.mu.Unlock()
		}
	}()
	tb.Cleanup(func() { ps.Close(); <-done })
	return e
}

// Heard returns the messages heard so far, as channel and payload.
func (e *Eavesdropper) Heard() []*redis.Message {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]*redis.Message(nil), e.heard...)
}

// Forgeries returns hand-over messages naming owner in every form a Redis
// driver sent or might send one: "OWNER", "OWNER TOKEN", "OWNER TOKEN N"
// and "OWNER TOKEN N NEXT" for each of tokens and each N from 0 to 9; and
// each payload of replays (messages heard earlier) as it was and with its
// first field replaced by owner.
func Forgeries(owner, next string, tokens []uint64, replays []string) []string {
	msgs := []string{owner}
	for _, tok := range tokens {
		msgs = append(msgs, fmt.Sprintf("%s %d", owner, tok))
		for n := range 10 {
			msgs = append(msgs, fmt.Sprintf("%s %d %d", owner, tok, n), fmt.Sprintf("%s %d %d %s", owner, tok, n, next))
		}
	}
	for _, r := range replays {
		msgs = append(msgs, r)
		if _, rest, ok := strings.Cut(r, " "); ok {
			msgs = append(msgs, owner+" "+rest)
		}
	}
	return msgs
}

// Forge publishes, as c, messages naming owner, one every 10 ms, so that
// a waiter acts on each before the next comes: first "OWNER TOKEN 64" 70
// times on channels[0], for the first of tokens (a run number that the
// waiter's own requests count up, one per wake, reaches 64 on the way),
// then the Forgeries of owner on each of channels.
func Forge(tb testing.TB, ctx context.Context, c *redis.Client, owner string, channels []string, tokens []uint64, replays []string) {
	tb.Helper()
	publish := func(ch, m string) {
		if err := c.Publish(ctx, ch, m).Err(); err != nil {
			tb.Fatalf("PUBLISH as the pub/sub user: %v", err)
		}
	}
	for range 70 {
		publish(channels[0], fmt.Sprintf("%s %d 64", owner, tokens[0]))
		time.Sleep(10 * time.Millisecond)
	}
	for _, m := range Forgeries(owner, owner, tokens, replays) {
		for _, ch := range channels {
			publish(ch, m)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ForgeWhileHeld is the attack of the pub/sub user c while held holds the
// key a queued waiter waits for: it publishes Forge's messages naming the
// waiter's owner on channels, with tokens around held's, and replays what
// e heard; wait(d) must not report the waiter's Lock granted within d of
// that. Then held's Unlock must hand the key over: wait reports the real
// grant, whose token must be above held's, and which is unlocked.
func ForgeWhileHeld(tb testing.TB, ctx context.Context, c *redis.Client, e *Eavesdropper, owner string, channels []string,
	held *lock.Lease, wait func(d time.Duration) (l *lock.Lease, returned bool, err error)) {
	tb.Helper()
	var replays []string
	for _, m := range e.Heard() {
		replays = append(replays, m.Payload)
	}
	tok := held.Token()
	Forge(tb, ctx, c, owner, channels, []uint64{tok + 1, 1, tok - 1, tok, 1 << 62}, replays)
	if l, returned, err := wait(100 * time.Millisecond); returned {
		tb.Fatalf("forged messages granted the key (token %d, err %v) while another client holds it", l.Token(), err)
	}
	if err := held.Unlock(ctx); err != nil {
		tb.Fatal(err)
	}
	l, _, err := wait(time.Hour)
	if err != nil {
		tb.Fatalf("the real hand-over: %v", err)
	}
	if l.Token() <= held.Token() {
		tb.Errorf("token %d after the holder's %d", l.Token(), held.Token())
	}
	l.Unlock(ctx)
}
