package chaos

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// fillMemoryMB is the memcached memory (-m) of the eviction scenarios:
// small, so that a few thousand items fill the lock's slab class.
const fillMemoryMB = 2

// filler writes items to a memcached server as fast as it can, each the
// size of the lock's item so that they share its slab class and LRU, until
// stopped. It counts the batches whose last store the server refused (out
// of memory).
type filler struct {
	addr    string
	digits  int // of the items' numbers
	conn    net.Conn
	stored  atomic.Int64
	refused atomic.Int64
	stop    chan struct{}
	wg      sync.WaitGroup
}

func startFiller(addr string, keyLen, valLen, exptime int) (*filler, error) {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return nil, err
	}
	digits := max(keyLen-len(FillerPrefix), 8)
	f := &filler{addr: addr, digits: digits, conn: conn, stop: make(chan struct{})}
	val := strings.Repeat("x", valLen)
	f.wg.Add(2)
	go func() { // errors come back even with noreply
		defer f.wg.Done()
		r := bufio.NewReader(conn)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			if strings.HasPrefix(line, "SERVER_ERROR") {
				f.refused.Add(1)
			}
		}
	}()
	go func() {
		defer f.wg.Done()
		var b strings.Builder
		for n := 0; ; {
			select {
			case <-f.stop:
				return
			default:
			}
			b.Reset()
			for i := range 500 {
				// memcached stays silent about a refused noreply store,
				// so the last of each batch asks for a reply.
				noreply := " noreply"
				if i == 499 {
					noreply = ""
				}
				fmt.Fprintf(&b, "set %s%0*d 0 %d %d%s\r\n%s\r\n", FillerPrefix, digits, n, exptime, valLen, noreply, val)
				n++
			}
			conn.SetWriteDeadline(time.Now().Add(2 * time.Second))
			if _, err := conn.Write([]byte(b.String())); err != nil {
				return
			}
			f.stored.Add(500)
			time.Sleep(time.Millisecond) // let the server's LRU maintainer breathe
		}
	}()
	return f, nil
}

func (f *filler) close() {
	close(f.stop)
	time.Sleep(50 * time.Millisecond)
	f.conn.Close()
	f.wg.Wait()
}

// drain deletes every item the (closed) filler wrote, in one pipelined
// connection: the pressure is lifted for real. Expired items do not free
// their memory promptly on a server started with -M, so waiting for the
// fillers' expiry leaves stores refused.
func (f *filler) drain() error {
	conn, err := net.DialTimeout("tcp", f.addr, 2*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	w := bufio.NewWriter(conn)
	for n := range f.stored.Load() {
		fmt.Fprintf(w, "delete %s%0*d noreply\r\n", FillerPrefix, f.digits, n)
	}
	io.WriteString(w, "version\r\n") // answered once every delete is done
	if err := w.Flush(); err != nil {
		return err
	}
	r := bufio.NewReader(conn)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return err
		}
		if strings.HasPrefix(line, "VERSION") {
			return nil
		}
	}
}

// fillLikeLock finds the grant's item on the memcached server and starts
// a filler whose items are the same size.
func (e *env) fillLikeLock(exptime int) *filler {
	addr := e.srv.Addrs[0]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	items, now, err := memcachedDump(ctx, addr)
	e.must(err, "list memcached items")
	for _, it := range items {
		if it.exp < 0 || it.exp <= now || strings.HasPrefix(it.key, FillerPrefix) {
			continue
		}
		v, found, err := memcachedGet(ctx, addr, it.key)
		if err != nil || !found || !ownerToken.MatchString(v) {
			continue
		}
		e.logf("filling memcached with items like %q (%d-byte value)", it.key, len(v))
		f, err := startFiller(addr, len(it.key), len(v), exptime)
		e.must(err, "start filler")
		return f
	}
	e.t.Fatalf("no grant found on memcached %s to fill around", addr)
	return nil
}

// memcachedEviction: memcached evicts A's grant under memory pressure
// while A holds it: a documented hazard that breaks exclusion until A's
// next refresh notices (stated). Fencing must still hold: B's token
// exceeds A's even if the counter was evicted too, so A's late writes are
// refused; and A must see Done at its next refresh.
func memcachedEviction(e *env) {
	e.stateLost("eviction of the lock's key under memory pressure")
	a, b := e.inproc("A", e.srv.Addrs), e.inproc("B", e.srv.Addrs)
	e.recoverWith = a
	ga, ok := e.mustLock(a, LockArgs{})
	if !ok {
		return
	}
	e.expectWrites(ga, a, 2)
	end := e.fault("memory-pressure", "server")
	f := e.fillLikeLock(3)
	var gb grant
	granted := false
	deadline := time.Now().Add(10 * time.Second)
	for !granted && time.Now().Before(deadline) {
		g, err := b.Lock(LockArgs{Key: e.key, Try: true, Timeout: time.Second})
		if err == nil {
			gb, granted = g, true
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	f.close()
	end()
	e.note("%d filler items written, %d batches refused for lack of memory", f.stored.Load(), f.refused.Load())
	if !e.expect(granted, "A's grant was evicted and B granted within 10s") {
		return
	}
	e.logf("B granted lease %d, token %d, after the eviction", gb.ID, gb.Token)
	e.expectWrites(gb, b, 1)
	e.expect(a.WaitDone(e.ttl/3+time.Second), "A saw Done at its next refresh")
	b.Unlock(5 * time.Second)
}

// memcachedNoEvict: the same pressure on a server started with -M, which
// refuses stores instead of evicting. A's grant must stay; nobody else may
// be granted; refreshes may fail for lack of memory, and then A loses its
// lease at its deadline, before its grant expires on the server.
func memcachedNoEvict(e *env) {
	a, c := e.inproc("A", e.srv.Addrs), e.inproc("C", e.srv.Addrs)
	e.recoverWith = a
	ga, ok := e.mustLock(a, LockArgs{})
	if !ok {
		return
	}
	e.expectWrites(ga, a, 2)
	end := e.fault("memory-pressure", "server")
	f := e.fillLikeLock(3)
	deadline := time.Now().Add(2 * e.bound)
	for time.Now().Before(deadline) {
		if _, err := c.Lock(LockArgs{Key: e.key, Try: true, Timeout: time.Second}); err == nil {
			e.logf("C was granted the key while A held it")
			c.Unlock(5 * time.Second)
		}
		time.Sleep(50 * time.Millisecond)
	}
	f.close()
	e.must(f.drain(), "delete the filler items")
	end()
	e.note("%d filler items written, %d batches refused for lack of memory", f.stored.Load(), f.refused.Load())
	e.expect(f.refused.Load() > 0, "the server ran out of memory")
	kept := !a.WaitDone(0)
	e.note("A kept its lease under memory pressure: %v", kept)
	if kept {
		a.Unlock(5 * time.Second)
	}
}

// residueNow searches the backend for grants and leaks, once.
func (e *env) residueNow() []string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	found, err := e.srv.Residue(ctx)
	if err != nil {
		e.expect(false, "searching the backend for residue: %v", err)
	}
	return found
}
