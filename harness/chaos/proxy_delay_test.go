package chaos

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/redis/go-redis/v9"
)

// The proxy tells a pub/sub connection from a command connection and
// delays each kind alone: DelayPubSub holds the messages (in order) while
// commands are answered at once, DelayCommands the other way round; and
// HoldReplies delivers one chosen reply late, after the server applied
// its request.
func TestProxyDelayByKind(t *testing.T) {
	srv := testserver.StartRedis(t, nil)
	p, err := NewProxy(srv.Addr(), RESP)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, DisableIdentity: true})
	defer c.Close()
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr(), DisableIdentity: true})
	defer direct.Close()
	ps := c.Subscribe(ctx, "ch")
	defer ps.Close()
	if _, err := ps.ReceiveTimeout(ctx, 2*time.Second); err != nil {
		t.Fatalf("subscribe: %v", err)
	}

	// Messages held 400ms, commands answered at once.
	const hold = 400 * time.Millisecond
	p.DelayPubSub(hold)
	start := time.Now()
	for _, m := range []string{"1", "2", "3"} {
		if err := direct.Publish(ctx, "ch", m).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Ping(ctx).Err(); err != nil || time.Since(start) > hold/2 {
		t.Errorf("a command under DelayPubSub: %v after %v", err, time.Since(start))
	}
	for _, want := range []string{"1", "2", "3"} {
		msg, err := ps.ReceiveMessage(ctx)
		if err != nil || msg.Payload != want {
			t.Fatalf("message %q: %v %v", want, msg, err)
		}
		if d := time.Since(start); d < hold {
			t.Errorf("message %q delivered after %v, under DelayPubSub(%v)", want, d, hold)
		}
	}

	// Commands held, messages not.
	p.DelayPubSub(0)
	p.DelayCommands(0, hold)
	start = time.Now()
	if err := direct.Publish(ctx, "ch", "4").Err(); err != nil {
		t.Fatal(err)
	}
	if msg, err := ps.ReceiveMessage(ctx); err != nil || msg.Payload != "4" || time.Since(start) > hold/2 {
		t.Errorf("a message under DelayCommands: %v %v after %v", msg, err, time.Since(start))
	}
	start = time.Now()
	if err := c.Ping(ctx).Err(); err != nil || time.Since(start) < hold {
		t.Errorf("a command under DelayCommands(%v): %v after %v", hold, err, time.Since(start))
	}
	p.DelayCommands(0, 0)

	// One reply held: the SET applied at once, its reply late; the next
	// command's reply on time.
	rule := p.HoldReplies(func(r Request) bool { return r.Cmd == "SET" }, 1, hold, nil)
	start = time.Now()
	done := make(chan error, 1)
	go func() { done <- c.Set(ctx, "k", "v", 0).Err() }()
	time.Sleep(hold / 4)
	if v, err := direct.Get(ctx, "k").Result(); v != "v" {
		t.Errorf("the held SET was not applied at once: %q, %v", v, err)
	}
	if err := <-done; err != nil || time.Since(start) < hold {
		t.Errorf("SET whose reply was held %v: %v after %v", hold, err, time.Since(start))
	}
	select {
	case req := <-rule.Dropped():
		if req.Cmd != "SET" {
			t.Errorf("held %+v", req)
		}
	default:
		t.Error("the held reply was not reported")
	}
	start = time.Now()
	if err := c.Set(ctx, "k", "w", 0).Err(); err != nil || time.Since(start) > hold/2 {
		t.Errorf("the next SET: %v after %v", err, time.Since(start))
	}

	// A reply filter: GET's replies held only when they say "y"; one
	// that does not passes and leaves the rule its count.
	rule = p.HoldReplies(func(r Request) bool { return r.Cmd == "GET" }, 1, hold, func(_ Request, frame []byte) bool {
		return strings.Contains(string(frame), "y")
	})
	defer rule.Stop()
	start = time.Now()
	if v, err := c.Get(ctx, "k").Result(); err != nil || v != "w" || time.Since(start) > hold/2 {
		t.Errorf("GET of %q, not held: %q %v after %v", "w", v, err, time.Since(start))
	}
	direct.Set(ctx, "k", "y", 0)
	start = time.Now()
	if v, err := c.Get(ctx, "k").Result(); err != nil || v != "y" || time.Since(start) < hold {
		t.Errorf("GET of %q, held %v: %q %v after %v", "y", hold, v, err, time.Since(start))
	}
	if errs := p.ParseErrors(); len(errs) > 0 {
		t.Errorf("parse errors: %v", errs)
	}
}
