package rediswatch

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/errtext"
	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/redis/go-redis/v9"
)

// Every operation is one optimistic transaction on one connection:
//
//	round trip 1: WATCH <keys>; <reads>          (one pipeline)
//	round trip 2: MULTI; <writes>; EXEC          (only if the reads allow)
//	          or: UNWATCH                        (if they do not)
//
// go-redis's Watch(ctx, fn, keys...) sends WATCH as a round trip of its
// own, so the driver pins a connection without it (Client.Watch with no
// keys) and pipelines WATCH with the reads itself. It then owns the
// connection's WATCH state: every path ends with EXEC (which discards it on
// commit and on abort), with UNWATCH, or with an error that makes go-redis
// drop the connection.

// unwatchTimeout bounds the UNWATCH sent when a transaction is not
// executed, so that a cancelled caller does not leave a watch armed on a
// pooled connection (a failed UNWATCH drops the connection instead).
const unwatchTimeout = 2 * time.Second

// errAborted is an EXEC aborted because a watched key changed.
var errAborted = errors.New("rediswatch: transaction aborted by a concurrent change")

// onConn runs fn on a connection to the master serving key's slot, with no
// WATCH sent yet. fn may run again (Cluster redirection), so it must set
// all of its results afresh on each run. fn gets the context to send its
// commands with: ctx, marked (laneCall) when the call runs on a lane.
func (d *watchDriver) onConn(ctx context.Context, key string, fn func(ctx context.Context, tx *redis.Tx) error) error {
	if d.Lanes.ReturnsAtContextEnd() {
		ctx = context.WithValue(ctx, laneCall{}, true)
	}
	return d.Lanes.Do(ctx, func(c redis.UniversalClient) error { return watchOn(ctx, c, key, fn) })
}

// laneCall marks the context of a call on a lane (redisx.Lanes): its
// connection is closed when the context ends, and the watch with it.
type laneCall struct{}

// watchOn is onConn on client c: a lane's, or the Locker's own client
// when it has no lanes (redisx.Lanes).
func watchOn(ctx context.Context, client redis.UniversalClient, key string, fn func(ctx context.Context, tx *redis.Tx) error) error {
	txFn := func(tx *redis.Tx) error { return fn(ctx, tx) }
	switch c := client.(type) {
	case *redis.Client:
		return c.Watch(ctx, txFn)
	case *redis.ClusterClient:
		node, err := c.MasterForKey(ctx, key)
		if err != nil {
			return err
		}
		err = node.Watch(ctx, txFn)
		if !isRedirect(err) {
			return err
		}
		// The slot moved: nothing was applied (a command sent to the wrong
		// node is refused, and a refused command aborts the EXEC). Let
		// go-redis's Watch follow the redirection, at the cost of its own
		// WATCH round trip, and refresh the slot map for next time.
		c.ReloadState(ctx)
		return c.Watch(ctx, txFn, key)
	default:
		// Ring and wrappers: go-redis picks the shard and sends WATCH key
		// first; fn's own WATCH adds the other keys.
		return client.Watch(ctx, txFn, key)
	}
}

func isRedirect(err error) bool {
	if err == nil {
		return false
	}
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	return strings.HasPrefix(msg, "MOVED ") || strings.HasPrefix(msg, "ASK ")
}

// watchAndRead sends WATCH keys and the commands queued by reads in one
// round trip. A missing key (redis.Nil) is a result, not an error. On
// error the watch is released.
func watchAndRead(ctx context.Context, tx *redis.Tx, keys []string, reads func(p redis.Pipeliner)) error {
	args := make([]any, 0, 1+len(keys))
	args = append(args, "watch")
	for _, k := range keys {
		args = append(args, k)
	}
	cmds, err := tx.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Do(ctx, args...)
		reads(p)
		return nil
	})
	for _, c := range cmds {
		if cerr := c.Err(); cerr != nil && !errors.Is(cerr, redis.Nil) {
			err = cerr
			break
		}
	}
	if err != nil && !errors.Is(err, redis.Nil) {
		unwatchAfter(ctx, tx, err)
		return err
	}
	return nil
}

// unwatchAfter releases the watch after err, if the connection survived
// it: when the server replied with an error. Any other error (network,
// context) makes go-redis drop the connection, and with it the watch; an
// UNWATCH would only dial a new one.
func unwatchAfter(ctx context.Context, tx *redis.Tx, err error) {
	var reply redis.Error
	if errors.As(err, &reply) {
		unwatch(ctx, tx)
	}
}

// unwatch releases the connection's watch when no EXEC follows.
func unwatch(ctx context.Context, tx *redis.Tx) {
	ctx, cancel := unwatchCtx(ctx)
	defer cancel()
	_ = tx.Unwatch(ctx).Err()
}

// unwatchCtx is the context of an UNWATCH sent under ctx: bounded by
// unwatchTimeout, and, unless the call runs on a lane (laneCall), not
// ended by ctx's end, so that a cancelled caller does not leave a watch
// armed on a pooled connection. A lane's connection is closed at ctx's
// end, and the watch with it: an UNWATCH past it would only retry, under
// go-redis's backoff, on a connection the lane refuses to dial, and keep
// the caller waiting past its context's end.
func unwatchCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Value(laneCall{}) == nil {
		ctx = context.WithoutCancel(ctx)
	}
	return context.WithTimeout(ctx, unwatchTimeout)
}

// exec runs MULTI, the commands queued by writes, and EXEC, in one round
// trip. It returns errAborted when a watched key changed (nothing was
// applied), and the first failed command's error otherwise; a nil reply
// (redis.Nil) is a result, not an error.
func exec(ctx context.Context, tx *redis.Tx, writes func(p redis.Pipeliner)) error {
	_, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
		writes(p)
		return nil
	})
	switch {
	case err == nil || errors.Is(err, redis.Nil):
		return nil
	case errors.Is(err, redis.TxFailedErr):
		return errAborted
	default:
		// The EXEC may not have run (a refused MULTI, say): make sure no
		// watch stays armed on a connection that goes back to the pool.
		unwatchAfter(ctx, tx, err)
		return err
	}
}

// value is a string key as a read found it: ok is false when the key was
// missing.
type value struct {
	s  string
	ok bool
}

// valueOf is what c, a GET (nil: not sent), read.
func valueOf(c *redis.StringCmd) value {
	if c == nil {
		return value{}
	}
	return value{s: c.Val(), ok: c.Err() == nil}
}

// doer is where a plan queues its writes: the pipeline of a MULTI/EXEC
// (see exec), or a test's record of them.
type doer interface {
	Do(ctx context.Context, args ...any) *redis.Cmd
}

// read sends the commands queued by reads in one round trip, with no
// WATCH. A missing key (redis.Nil) is a result, not an error.
func read(ctx context.Context, tx *redis.Tx, reads func(p redis.Pipeliner)) error {
	cmds, err := tx.Pipelined(ctx, func(p redis.Pipeliner) error {
		reads(p)
		return nil
	})
	for _, c := range cmds {
		if cerr := c.Err(); cerr != nil && !errors.Is(cerr, redis.Nil) {
			return cerr
		}
	}
	if errors.Is(err, redis.Nil) {
		return nil
	}
	return err
}

// execUnwatched releases the connection's watch and runs cmds (each a
// command's arguments) in a transaction, in one round trip:
//
//	UNWATCH; MULTI; <cmds>; EXEC
//
// so that no change made since the WATCH aborts it. It returns EXEC's
// replies, one per command, as go-redis reads them untyped (a nil reply is
// nil). A command's error reply, or a command refused as it was queued
// (EXEC then applies nothing), is returned as a *cmdError. (go-redis's
// TxPipelined cannot send UNWATCH before its MULTI; the commands are sent
// here as plain pipelined ones, whose replies inside the transaction are
// QUEUED.)
func execUnwatched(ctx context.Context, tx *redis.Tx, cmds ...[]any) ([]any, error) {
	sent := make([]*redis.Cmd, len(cmds))
	var done *redis.Cmd
	_, err := tx.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Do(ctx, "unwatch")
		p.Do(ctx, "multi")
		for i, c := range cmds {
			sent[i] = p.Do(ctx, c...)
		}
		done = p.Do(ctx, "exec")
		return nil
	})
	for i, c := range sent {
		var reply redis.Error
		if errors.As(c.Err(), &reply) {
			return nil, &cmdError{i: i, err: c.Err()} // refused as queued
		}
	}
	if errors.Is(err, redis.Nil) && errors.Is(done.Err(), redis.Nil) {
		return nil, errAborted // not after UNWATCH; for completeness
	}
	if err != nil {
		return nil, err
	}
	replies, ok := done.Val().([]any)
	if !ok || len(replies) != len(cmds) {
		return nil, fmt.Errorf("rediswatch: EXEC replied %v to %d commands", done.Val(), len(cmds))
	}
	for i, r := range replies {
		if e, ok := r.(error); ok {
			return replies, &cmdError{i: i, err: e}
		}
	}
	return replies, nil
}

// cmdError is the error reply to the i-th command of execUnwatched.
type cmdError struct {
	i   int
	err error
}

func (e *cmdError) Error() string { return e.err.Error() }
func (e *cmdError) Unwrap() error { return e.err }

// retryAborted runs attempt, one owner-checked transaction on lk, again
// while a concurrent change to a watched key aborts it (only the holder
// writes a held key, so it is tried at once): aborts counts each abort, and
// after d.maxAttempts transactions the call gives up with an error
// wrapping ErrConflict. op names the operation in that error.
func (d *watchDriver) retryAborted(ctx context.Context, op, lk string, aborts *atomic.Uint64, attempt func() error) error {
	for n := 1; ; n++ {
		err := attempt()
		if !errors.Is(err, errAborted) {
			return redisx.WithCtx(ctx, err)
		}
		aborts.Add(1)
		if n >= d.maxAttempts {
			d.stats.gaveUp.Add(1)
			return fmt.Errorf("%w: %s of %s gave up after %d aborted transactions", ErrConflict, op, errtext.Quote(lk), n)
		}
		if ctx.Err() != nil {
			return redisx.WithCtx(ctx, ctx.Err())
		}
	}
}

func (d *watchDriver) hook(op, lockKey string) {
	if f := d.beforeExec.Load(); f != nil {
		(*f)(op, lockKey)
	}
}
