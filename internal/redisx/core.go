package redisx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errtext"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// DefaultPrefix is put before every Redis key and channel name when
// Options.Prefix is empty; both drivers' default, so that they use the same
// names for a key.
const DefaultPrefix = "dlock:"

// Options configure a Locker of either Redis driver. A nil *Options means
// defaults.
type Options struct {
	lock.Options
	// Prefix is put before every Redis key and channel name the Locker
	// uses (DefaultPrefix when empty). For a key K the lock is "<prefix>{K}",
	// its fencing counter "<prefix>{K}:fence" and its release channel
	// "<prefix>{K}:rel". It must not contain "{" or "}": the key's braces
	// are the Redis Cluster hash tag.
	Prefix string
}

// Core is what both drivers are made of besides their algorithms: the
// client, the names, the notifier, validation and the client's life.
// Embedded in a driver, it provides As, Close and Subscribe
// (driver.Notifier).
type Core struct {
	Client redis.UniversalClient
	Prefix string
	Notify *Notifier
	// Lanes run the drivers' commands, promptly (see Lanes); a
	// redis.Scripter.
	Lanes *Lanes
	// SharedLeases: Validate accepts shared leases (the driver grants them).
	SharedLeases bool
	// Permits: Validate accepts the permits of semaphores (the driver
	// grants them).
	Permits bool
	name    string
	owns    bool       // opened from a URL: Close closes Client
	log     *clientLog // where the client's go-redis lines go, when owned
	bad     error      // an unusable configuration; Validate reports it
}

// NewCore returns the core of driver name over client, and the lock.Options
// part of o. A nil or typed-nil client, or a prefix with braces, makes
// every Validate fail with ErrInvalid rather than a call panic.
func NewCore(name string, client redis.UniversalClient, o *Options, owns bool) (Core, *lock.Options) {
	var lo *lock.Options
	prefix := DefaultPrefix
	if o != nil {
		lo = &o.Options
		if o.Prefix != "" {
			prefix = o.Prefix
		}
	}
	c := Core{Client: client, Prefix: prefix, name: name, owns: owns}
	switch {
	case NilClient(client):
		c.Client = nil
		c.bad = fmt.Errorf("%s: nil Redis client", name)
	case strings.ContainsAny(prefix, "{}"):
		c.bad = fmt.Errorf("%s: key prefix %s contains \"{\" or \"}\"", name, errtext.Quote(prefix))
	}
	c.Notify = NewNotifier(c.Client, prefix)
	if owns && c.Client != nil {
		c.log = &clientLog{name: name}
		logHook{c.log}.hook(c.Client)
		c.Notify.ctx = c.log.mark(c.Notify.ctx)
	}
	var hook redis.Hook
	if c.log != nil {
		hook = logHook{c.log}
	}
	c.Lanes = NewLanes(c.Client, hook)
	return c, lo
}

// SetLogger implements driver.LogSetter: the go-redis lines of a client
// built from a URL go to l, nowhere when l is nil (see log.go). The lines
// of a client the user gave are left to the user's go-redis logger.
func (c *Core) SetLogger(l *slog.Logger) {
	if c.log != nil {
		c.log.l.Store(l)
	}
}

// LockKey returns the Redis key of the lock on key.
func (c *Core) LockKey(key string) string { return LockKey(c.Prefix, key) }

// Validate refuses what the drivers cannot carry: shared leases (unless
// SharedLeases), permits (unless Permits), keys that are not UTF-8, TTLs below Redis's millisecond.
func (c *Core) Validate(l *driver.Lease) error {
	switch {
	case c.bad != nil:
		return fmt.Errorf("%w: %v", driver.ErrInvalid, c.bad)
	case l.Mode == driver.Shared && !c.SharedLeases:
		return fmt.Errorf("%w: %s grants no shared leases", driver.ErrInvalid, c.name)
	case l.Mode == driver.Permit && !c.Permits:
		return fmt.Errorf("%w: %s grants no semaphore permits", driver.ErrInvalid, c.name)
	case !utf8.ValidString(l.Key):
		return fmt.Errorf("%w: key is not valid UTF-8", driver.ErrInvalid)
	case l.TTL < time.Millisecond:
		return fmt.Errorf("%w: TTL %v is below Redis's 1ms resolution", driver.ErrInvalid, l.TTL)
	}
	return nil
}

// Subscribe implements driver.Notifier. Once subscribed, it writes the
// key's listener mark, P{K}:l (names.go), and renews it every
// ListenLife/3 until the returned cancel: redisnx's uncontended release
// publishes on P{K}:rel only while a mark or a queue exists. The mark is
// written before Subscribe returns, so that every release after the
// caller's next attempt (lock attempts once more at once) publishes. A
// mark the server refuses costs only promptness: the waiter then polls.
func (c *Core) Subscribe(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	lk := c.LockKey(key)
	w, unsub, err := c.Notify.Subscribe(ctx, lk)
	if err != nil {
		return nil, nil, err
	}
	stop := c.listen(ctx, lk+ListenSuffix)
	if err := ctx.Err(); err != nil {
		stop()
		unsub()
		return nil, nil, err
	}
	return w, func() { stop(); unsub() }, nil
}

// ListenLife is how long a listener mark lasts after its last write.
const ListenLife = time.Minute

// listen writes the listener mark, and again every ListenLife/3 until the
// returned stop.
func (c *Core) listen(ctx context.Context, mark string) (stop func()) {
	write := func(ctx context.Context) {
		_ = c.Lanes.Do(ctx, func(rc redis.UniversalClient) error {
			return rc.Set(ctx, mark, "1", ListenLife).Err()
		})
	}
	if c.Lanes.ReturnsAtContextEnd() {
		write(ctx) // a lane returns at ctx's end
	} else {
		// go-redis stops a command at ctx's deadline only: Subscribe
		// must return at its cancellation too (lock calls it inline).
		done := make(chan struct{})
		go func() {
			defer close(done)
			write(ctx)
		}()
		select {
		case <-done:
		case <-ctx.Done():
		}
	}
	var mu sync.Mutex
	stopped := false
	var t *time.Timer
	t = time.AfterFunc(ListenLife/3, func() {
		ctx, cancel := context.WithTimeout(c.Notify.ctx, ListenLife/3)
		write(ctx)
		cancel()
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			t.Reset(ListenLife / 3)
		}
	})
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		t.Stop()
	}
}

// As sets a *redis.UniversalClient target to the client, and a
// **redis.Client, **redis.ClusterClient or **redis.Ring target when the
// client is of that type.
func (c *Core) As(target any) bool {
	switch p := target.(type) {
	case *redis.UniversalClient:
		*p = c.Client
		return c.Client != nil
	case **redis.Client:
		return as(c.Client, p)
	case **redis.ClusterClient:
		return as(c.Client, p)
	case **redis.Ring:
		return as(c.Client, p)
	case **Lanes: // tests: close them to stop a Locker's traffic
		*p = c.Lanes
		return c.Lanes != nil
	}
	return false
}

func as[T any](client redis.UniversalClient, p *T) bool {
	c, ok := client.(T)
	if ok {
		*p = c
	}
	return ok
}

// Close ends the pub/sub connections and, for a Locker opened from a URL,
// closes the client. A second Close returns nil.
func (c *Core) Close() error {
	c.Notify.Close()
	c.Lanes.Close()
	if c.owns && c.Client != nil {
		c.owns = false
		if err := c.Client.Close(); err != nil && !errors.Is(err, redis.ErrClosed) {
			return fmt.Errorf("%s: closing the client: %w", c.name, err)
		}
	}
	return nil
}

// WithCtx returns err, the failure of a call bound to ctx, wrapping
// ctx.Err() when ctx ended, so that callers see context.DeadlineExceeded
// or Canceled, and marked as driver.ErrUnavailable when it says the
// server is unreachable (see unreachable). go-redis reports a deadline that passed during a read as a
// network timeout, sometimes a moment before ctx itself reports it (its
// socket deadline and ctx's timer race): a timeout at or past ctx's
// deadline waits briefly for ctx to agree.
func WithCtx(ctx context.Context, err error) error {
	if err == nil || errors.Is(err, driver.ErrHeld) || errors.Is(err, driver.ErrNotHeld) {
		return err
	}
	cerr := ctx.Err()
	if cerr == nil {
		var ne net.Error
		if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) && errors.As(err, &ne) && ne.Timeout() {
			t := time.NewTimer(100 * time.Millisecond)
			select {
			case <-ctx.Done():
				cerr = ctx.Err()
			case <-t.C:
				cerr = context.DeadlineExceeded
			}
			t.Stop()
		}
	}
	switch {
	case cerr == nil && unreachable(err):
		return driver.Unavailable(err)
	case cerr == nil || errors.Is(err, cerr):
		return err
	}
	return fmt.Errorf("%w: %w", cerr, err)
}

// unreachable reports whether err says that the server cannot serve: a
// network failure (driver.NetFailure), or a server that is up but not
// serving yet or without a master (LOADING, MASTERDOWN, CLUSTERDOWN).
func unreachable(err error) bool {
	if driver.NetFailure(err) {
		return true
	}
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	for _, p := range []string{"LOADING ", "MASTERDOWN ", "CLUSTERDOWN "} {
		if strings.HasPrefix(re.Error(), p) {
			return true
		}
	}
	return false
}

// Register registers the URL schemes of driver name with lock.Open: name
// and its TLS variant tlsName. mk makes the driver from its Core, which
// owns the client the URL describes (see Parse).
func Register(name, tlsName string, mk func(Core) driver.Driver) {
	open := func(ctx context.Context, u *url.URL) (driver.Driver, *lock.Options, error) {
		c, err := Parse(u, tlsName)
		if err != nil {
			return nil, nil, err
		}
		core, lo := NewCore(name, c.NewClient(), &Options{Options: *c.Options, Prefix: c.Prefix}, true)
		return mk(core), lo, nil
	}
	lock.Register(name, open)
	lock.Register(tlsName, open)
}

// Groups splits the indexes of the lock keys lks into groups that one
// script or transaction may touch, of at most limit each: all of them on a
// single server, one hash slot on a Cluster, one shard on a Ring when
// byShard is set (else, as for other clients, one key each).
func (c *Core) Groups(lks []string, limit int, byShard bool) [][]int {
	byKey := map[any][]int{}
	var order []any
	for i, lk := range lks {
		var k any
		switch cl := c.Client.(type) {
		case *redis.Client:
		case *redis.ClusterClient:
			k = Slot(lk)
		case *redis.Ring:
			k = i // no shard known: a group of its own, which will fail alone
			if s, err := cl.GetShardClientForKey(lk); err == nil && byShard {
				k = s
			}
		default:
			k = i
		}
		if _, ok := byKey[k]; !ok {
			order = append(order, k)
		}
		byKey[k] = append(byKey[k], i)
	}
	var groups [][]int
	for _, k := range order {
		for g := byKey[k]; len(g) > 0; g = g[min(len(g), limit):] {
			n := min(len(g), limit)
			groups = append(groups, g[:n:n])
		}
	}
	return groups
}
