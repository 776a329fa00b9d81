package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// listener is a Locker's LISTEN connection: the release of a key (and the
// expiry of a grant, found by the next step on the key) notifies each
// waiter whose turn has come, on its Locker's own channel (the schema's
// name, _ and 12 random hex digits, kept in the waiter's entry), with the
// waiter's owner token as payload (schema.sql, wake3). So a hand-over
// wakes the one connection whose waiter is next. The listener
// wakes the Locker's waiter of that owner, which checks the key at once.
// A notification only wakes: anyone who may NOTIFY can send one, and a
// waiter's own step decides on the server.
//
// Notifications sent while the connection is down are lost, so each time
// LISTEN takes effect the listener wakes every waiter; between those
// times, lock steps every waiter at least every driver.Heartbeat.
type listener struct {
	cfg     *pgx.ConnConfig
	channel string

	mu      sync.Mutex
	waiters map[string]chan<- struct{}
	started bool
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{}
}

// channelName is a new Locker's channel in schema: at most 63 bytes, an
// identifier's limit (a schema name has at most 50).
func channelName(schema string) string {
	var b [6]byte
	rand.Read(b[:])
	return schema + "_" + hex.EncodeToString(b[:])
}

func newListener(cfg *pgx.ConnConfig, channel string) *listener {
	ctx, cancel := context.WithCancel(context.Background())
	return &listener{cfg: cfg, channel: channel, waiters: map[string]chan<- struct{}{}, ctx: ctx, cancel: cancel, done: make(chan struct{})}
}

// add registers owner's wake channel, and starts the listener on first use.
func (n *listener) add(owner string, wake chan<- struct{}) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.waiters[owner] = wake
	if !n.started && n.ctx.Err() == nil {
		n.started = true
		go n.run()
	}
}

func (n *listener) remove(owner string) {
	n.mu.Lock()
	delete(n.waiters, owner)
	n.mu.Unlock()
}

func (n *listener) wake(owner string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if w := n.waiters[owner]; w != nil {
		poke(w)
	}
}

func (n *listener) wakeAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, w := range n.waiters {
		poke(w)
	}
}

func poke(w chan<- struct{}) {
	select {
	case w <- struct{}{}:
	default:
	}
}

// run keeps a connection listening until close, making a new one (after
// a pause that grows to a second) whenever it breaks.
func (n *listener) run() {
	defer close(n.done)
	pause := 10 * time.Millisecond
	for n.ctx.Err() == nil {
		if n.listen() {
			pause = 10 * time.Millisecond
		}
		select {
		case <-n.ctx.Done():
		case <-time.After(pause):
		}
		pause = min(2*pause, time.Second)
	}
}

// listen makes one connection, listens on it until it breaks or close,
// and reports whether LISTEN took effect.
func (n *listener) listen() bool {
	conn, err := pgx.ConnectConfig(n.ctx, n.cfg)
	if err != nil {
		return false
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn.Close(ctx)
		cancel()
	}()
	if _, err := conn.Exec(n.ctx, `LISTEN "`+n.channel+`"`); err != nil {
		return false
	}
	n.wakeAll() // what was sent while no LISTEN was in force is lost
	for {
		msg, err := conn.WaitForNotification(n.ctx)
		if err != nil {
			return true
		}
		n.wake(msg.Payload)
	}
}

// close stops the listener and waits for its goroutine.
func (n *listener) close() {
	n.mu.Lock()
	n.cancel()
	started := n.started
	n.mu.Unlock()
	if started {
		<-n.done
	}
}
