package postgres

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
	"github.com/jackc/pgx/v5/pgxpool"
)

// replyDropper is a TCP proxy that, once armed, lets the next request a
// client sends reach the server and be applied, swallows the server's
// reply and closes that client's connection: a reply lost after the
// server committed.
type replyDropper struct {
	target  string
	ln      net.Listener
	armed   atomic.Bool
	dropped atomic.Int32
}

func newReplyDropper(t testing.TB, target string) *replyDropper {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &replyDropper{target: target, ln: ln}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, s)
			mu.Unlock()
			go p.pipe(c, s)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return p
}

func (p *replyDropper) pipe(client, server net.Conn) {
	var drop atomic.Bool
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := client.Read(buf)
			if n > 0 {
				if p.armed.CompareAndSwap(true, false) {
					drop.Store(true)
				}
				server.Write(buf[:n])
			}
			if err != nil {
				server.(*net.TCPConn).CloseWrite()
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 && drop.Load() {
			// The server answered: it committed. Lose the answer.
			p.dropped.Add(1)
			client.Close()
			io.Copy(io.Discard, server)
			return
		}
		if n > 0 {
			client.Write(buf[:n])
		}
		if err != nil {
			client.Close()
			return
		}
	}
}

// dropperLocker is a Locker whose pool and listener go through p.
func dropperLocker(t testing.TB, url string, p *replyDropper, o *Options) *lock.Locker {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(p.ln.Addr().String())
	pn, _ := strconv.Atoi(port)
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, uint16(pn)
	cfg.ConnConfig.Fallbacks = nil
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if o == nil {
		o = &Options{}
	}
	d, lo := newDriver(pool, o, true)
	l := lock.New(d, lo)
	t.Cleanup(func() { l.Close() })
	return l
}

// TestAudit39LostFastPathReply: the reply of lock3's fast path (a grant
// in the key's row, committed) is lost. A TryLock fails and its clean-up
// must clear the row's grant, so another client gets the key well
// before the TTL; a Lock learns its grant by its next step (check_turn3
// finds the row's holder) and holds it with that token. The reply of
// unlock3's fast path lost: the key is free, and its retried release
// takes nothing from the next holder.
func TestAudit39LostFastPathReply(t *testing.T) {
	ctx := tctx(t, time.Minute)
	url := envDB(t, "audit39_lost")
	raw := rawPool(t, url)
	other := newTestLocker(t, url, nil, &netCut{})
	p := newReplyDropper(t, serverAddr(t, url))
	a := dropperLocker(t, url, p, nil)
	warmKey := auditKey("audit39-lost-warm")
	w, err := a.Lock(ctx, warmKey)
	if err != nil {
		t.Fatal(err)
	}
	w.Unlock(ctx)

	t.Run("TryLock", func(t *testing.T) {
		key := auditKey("audit39-lost-try")
		p.armed.Store(true)
		l, err := a.TryLock(ctx, key, lock.WithTTL(30*time.Second))
		if err == nil {
			l.Unlock(ctx)
			t.Fatalf("TryLock granted though its reply was lost")
		}
		t.Logf("TryLock with its reply lost: %v (replies dropped %d); the key: %q", err, p.dropped.Load(), entriesOf(t, raw, "dlock", key))
		freeWithin(t, other, key, 5*time.Second)
	})
	t.Run("Lock", func(t *testing.T) {
		key := auditKey("audit39-lost-lock")
		p.armed.Store(true)
		l, err := a.Lock(ctx, key, lock.WithTTL(30*time.Second))
		if err != nil {
			t.Fatalf("Lock with its grant's reply lost: %v", err)
		}
		if p.dropped.Load() != 2 {
			t.Fatalf("%d replies dropped, want 2 (the test proves nothing)", p.dropped.Load())
		}
		var holder *string
		var tok int64
		if err := raw.QueryRow(ctx, "SELECT holder, token FROM dlock.keys WHERE key = $1", key).Scan(&holder, &tok); err != nil {
			t.Fatal(err)
		}
		if holder == nil || uint64(tok) != l.Token() {
			t.Fatalf("the lease's token %d, the row's grant %v token %d", l.Token(), holder, tok)
		}
		if o, err := other.TryLock(ctx, key); err == nil {
			o.Unlock(ctx)
			t.Fatalf("two holders: tokens %d and %d", l.Token(), o.Token())
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		freeWithin(t, other, key, 2*time.Second)
	})
	t.Run("Unlock", func(t *testing.T) {
		key := auditKey("audit39-lost-unlock")
		l, err := a.Lock(ctx, key, lock.WithTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		p.armed.Store(true)
		uerr := l.Unlock(ctx)
		t.Logf("Unlock with its reply lost: %v", uerr)
		var ob *lock.Lease
		waitFor(t, "the key free after the lost Unlock reply", 5*time.Second, func() bool {
			ob, err = other.TryLock(ctx, key, lock.WithTTL(30*time.Second))
			return err == nil
		})
		time.Sleep(1500 * time.Millisecond) // a retried release has had its chance
		select {
		case <-ob.Done():
			t.Fatalf("the next holder lost its lease: %v", ob.Err())
		default:
		}
		var ok bool
		if err := raw.QueryRow(ctx, "SELECT dlock.holds_grant($1, $2)", key, int64(ob.Token())).Scan(&ok); err != nil || !ok {
			t.Fatalf("holds_grant of the next holder: %v, %v", ok, err)
		}
		if ob.Token() <= l.Token() {
			t.Errorf("token %d after %d", ob.Token(), l.Token())
		}
		if err := ob.Unlock(ctx); err != nil && !errors.Is(err, lock.ErrNotHeld) {
			t.Fatal(err)
		}
	})
}
