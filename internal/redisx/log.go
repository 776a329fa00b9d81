package redisx

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"os"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// go-redis (v9.22) has one logger for the whole process (redis.SetLogger)
// and none per client; it prints to stderr by default ("redis: pool.go:762:
// connection pool: failed to dial after 5 attempts", once per failed dial
// while a server is down). The logger is given the context of the code
// that logs and the line's arguments, and that is how the lines of the
// clients this package builds (from a URL, for lock.Open) are told apart.
// A hook on those clients (on every node of a Cluster) marks the context
// of each of their calls and dials with the client's clientLog, and marks
// the errors their dials return (same text, same type for a *net.OpError,
// errors.Is and errors.As see through); the pool dials on a context of
// its own, but logs the dial's error. The logger installed at init
// (router) sends a line with either mark to the Locker's Options.Logger,
// or nowhere without one, and prints every other line as go-redis's
// default logger does. A client the user built and passed to New gets no
// mark: its lines, like those of the user's other clients, are printed as
// before, or go to the logger the program set.
//
// The router is installed at init, before any client can log, because
// go-redis reads its logger without synchronisation; a redis.SetLogger
// made later by the program replaces it, and then every line, dlock's
// clients' included, goes to the program's logger. A line go-redis logs
// with neither mark (outside any call: a connection that failed to close,
// a Cluster whose every node fails; or the dial of a Sentinel, which is
// go-redis's own client) is printed.

func init() {
	redis.SetLogger(&router{std: log.New(os.Stderr, "redis: ", log.LstdFlags|log.Lshortfile)})
}

// router is the go-redis logger this package installs.
type router struct{ std *log.Logger }

// Printf sends a line of a client this package built to its clientLog,
// and prints any other as go-redis's default logger does (same prefix,
// flags and file:line of the go-redis call).
func (r *router) Printf(ctx context.Context, format string, v ...any) {
	if cl := marked(ctx, v); cl != nil {
		cl.log(ctx, fmt.Sprintf(format, v...))
		return
	}
	_ = r.std.Output(2, fmt.Sprintf(format, v...))
}

// marked returns the clientLog that ctx or an error among args is marked
// with, or nil.
func marked(ctx context.Context, args []any) *clientLog {
	if ctx != nil {
		if cl, ok := ctx.Value(clientLogKey{}).(*clientLog); ok {
			return cl
		}
	}
	for _, a := range args {
		var me *markedError
		if err, ok := a.(error); ok && errors.As(err, &me) {
			return me.cl
		}
	}
	return nil
}

type clientLogKey struct{}

// clientLog is where the go-redis lines of one client built here go: the
// Locker's Options.Logger (set by SetLogger), at Warn, or nowhere.
type clientLog struct {
	name string // the driver's
	l    atomic.Pointer[slog.Logger]
}

func (cl *clientLog) log(ctx context.Context, line string) {
	if l := cl.l.Load(); l != nil {
		l.Log(ctx, slog.LevelWarn, "dlock: redis client", "driver", cl.name, "line", line)
	}
}

// mark returns ctx marked as a call of cl's client.
func (cl *clientLog) mark(ctx context.Context) context.Context {
	if ctx == nil || ctx.Value(clientLogKey{}) == cl {
		return ctx
	}
	return context.WithValue(ctx, clientLogKey{}, cl)
}

// markErr returns err marked as cl's: a *net.OpError stays one (with its
// Err marked), so that go-redis classifies it as before.
func (cl *clientLog) markErr(err error) error {
	var me *markedError
	if errors.As(err, &me) {
		return err
	}
	if oe, ok := err.(*net.OpError); ok {
		c := *oe
		c.Err = &markedError{err: oe.Err, cl: cl}
		return &c
	}
	return &markedError{err: err, cl: cl}
}

// markedError is an error of a dial of a client built here: err, with
// where its client's lines go.
type markedError struct {
	err error
	cl  *clientLog
}

func (e *markedError) Error() string { return e.err.Error() }
func (e *markedError) Unwrap() error { return e.err }

// Timeout and Temporary answer as err does, for net.OpError's methods of
// the same names.
func (e *markedError) Timeout() bool {
	t, ok := e.err.(interface{ Timeout() bool })
	return ok && t.Timeout()
}

func (e *markedError) Temporary() bool {
	t, ok := e.err.(interface{ Temporary() bool })
	return ok && t.Temporary()
}

// logHook marks the calls and dials of a client built here: their
// contexts, and the errors of the dials.
type logHook struct{ cl *clientLog }

func (h logHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(h.cl.mark(ctx), network, addr)
		if err != nil {
			err = h.cl.markErr(err)
		}
		return c, err
	}
}

func (h logHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { return next(h.cl.mark(ctx), cmd) }
}

func (h logHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { return next(h.cl.mark(ctx), cmds) }
}

// hook installs h on client, and on every node of a Cluster, whose node
// clients dial for it.
func (h logHook) hook(client redis.UniversalClient) {
	client.AddHook(h)
	if cc, ok := client.(*redis.ClusterClient); ok {
		cc.OnNewNode(func(node *redis.Client) { node.AddHook(h) })
	}
}
