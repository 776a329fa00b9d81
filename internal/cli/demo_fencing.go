//go:build demo

package cli

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// sceneTimeout bounds the fencing scene on one backend.
const sceneTimeout = 20 * time.Second

// scene is what the fencing scene saw on one backend: holder A lost its
// lease to a fault, holder B was granted the key, and a fenced resource
// took B's write and A's late one.
type scene struct {
	fault          string // what was done to A's lease
	paused         bool   // the fault was a pause: Done must fire before B's grant
	tokenA, tokenB uint64
	doneAt         time.Duration // A's Done fired, since the fault began
	grantAt        time.Duration // B was granted, since the fault began
	lost           error         // A's Err once Done fired
	acceptedB      bool          // the resource took B's write
	refusedA       bool          // the resource refused A's late write
}

// lines are the scene's two lines of output, after the backend's name;
// times count from the fault, events in the order they happened:
//
//	A holds token 1795771131787784, server paused (SIGSTOP) 1.2s: A's Done at 0.99s, B granted at 1.20s
//	B writes with token 1795771132991921: accepted; A, late, with 1795771131787784: refused
func (s *scene) lines() [2]string {
	events := fmt.Sprintf("A's Done at %s, B granted at %s", seconds2(s.doneAt), seconds2(s.grantAt))
	if s.grantAt < s.doneAt {
		events = fmt.Sprintf("B granted at %s, A's Done at %s", seconds2(s.grantAt), seconds2(s.doneAt))
	}
	verdict := func(ok bool, yes, no string) string {
		if ok {
			return yes
		}
		return no
	}
	return [2]string{
		fmt.Sprintf("A holds token %d, %s: %s", s.tokenA, s.fault, events),
		fmt.Sprintf("B writes with token %d: %s; A, late, with %d: %s", s.tokenB,
			verdict(s.acceptedB, "accepted", "REFUSED"), s.tokenA, verdict(s.refusedA, "refused", "ACCEPTED")),
	}
}

// check returns what is wrong with what the scene saw, or nil.
func (s *scene) check() error {
	switch {
	case !errors.Is(s.lost, lock.ErrLost):
		return fmt.Errorf("holder A's lease ended with %v, not lost", s.lost)
	case s.paused && s.grantAt <= s.doneAt:
		return fmt.Errorf("holder B was granted at %v, before A's Done fired at %v", s.grantAt, s.doneAt)
	case s.tokenB <= s.tokenA:
		return fmt.Errorf("holder B's token %d is not above A's %d", s.tokenB, s.tokenA)
	case !s.acceptedB || !s.refusedA:
		return errors.New("the fenced resource got the writes wrong")
	}
	return nil
}

// seconds2 prints d in seconds with two decimals.
func seconds2(d time.Duration) string { return fmt.Sprintf("%.2fs", d.Seconds()) }

// fencingScene shows on t's backend what happens when a lease is lost:
// holder A takes key and writes to a fenced resource; a fault (pauseFault
// where the demo started the server, deleteFault otherwise) makes A lose
// the lease and its Done fire; holder B is granted the key and writes;
// then A, late, writes with its old token, which the resource refuses.
// A and B are two Lockers of this process, each with its own
// connections.
func (d *demoConfig) fencingScene(ctx context.Context, t target, key string) (*scene, error) {
	ctx, cancel := context.WithTimeout(ctx, sceneTimeout)
	defer cancel()
	u := sceneURL(t.url)
	lockers := make([]*lock.Locker, 2, 3) // A, B, and the one a deleteFault goes through
	if t.pause == nil {
		lockers = lockers[:3]
	}
	for i := range lockers {
		l, err := lock.Open(ctx, u)
		if err != nil {
			return nil, err
		}
		defer l.Close()
		lockers[i] = l
	}
	a, b := lockers[0], lockers[1]
	lease, err := a.TryLock(ctx, key, lock.WithTTL(sceneTTL(t.url)))
	if err != nil {
		return nil, fmt.Errorf("holder A: %w", err)
	}
	defer lease.Unlock(ctx)
	var f fault
	if t.pause != nil {
		f = &pauseFault{srv: t.pause, hold: serverLife(t.url)}
	} else {
		f = &deleteFault{op: lockers[2], url: u, key: key}
	}
	s := &scene{tokenA: lease.Token(), paused: t.pause != nil}
	var res fencedResource
	res.write(lease.Token()) // A's work while it holds the key

	began := time.Now()
	if s.fault, err = f.start(ctx); err != nil {
		return nil, err
	}
	done := make(chan time.Duration, 1)
	go func() {
		select {
		case <-lease.Done():
			done <- time.Since(began)
		case <-ctx.Done():
		}
	}()
	if err := f.heal(); err != nil {
		return nil, err
	}
	bl, err := lockRetrying(ctx, b, key)
	if err != nil {
		return nil, fmt.Errorf("holder B: %w", err)
	}
	s.grantAt = time.Since(began)
	defer bl.Unlock(ctx)
	select {
	case s.doneAt = <-done:
	case <-ctx.Done():
		return nil, fmt.Errorf("holder A's Done did not fire within %v", sceneTimeout)
	}
	s.lost, s.tokenB = lease.Err(), bl.Token()
	s.acceptedB = res.write(bl.Token())
	s.refusedA = !res.write(lease.Token())
	return s, nil
}

// lockRetrying takes key with l, trying again after errors (a client
// reconnecting after a pause) until ctx ends.
func lockRetrying(ctx context.Context, l *lock.Locker, key string) (*lock.Lease, error) {
	for {
		lease, err := l.Lock(ctx, key)
		if err == nil || ctx.Err() != nil || errors.Is(err, lock.ErrInvalid) {
			return lease, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// sceneTTL is the TTL of A's lease: short, so that the scene is too;
// memcached counts whole seconds from 3s. (ZooKeeper's session decides:
// see sceneURL.)
func sceneTTL(rawURL string) time.Duration {
	if schemeOf(rawURL) == "memcached" {
		return 3 * time.Second
	}
	return time.Second
}

// sceneSession is the ZooKeeper session timeout the scene asks for,
// unless the URL sets one.
const sceneSession = 2 * time.Second

// sceneURL is the URL of the scene's Lockers: t's, with a short session
// timeout on ZooKeeper, whose sessions decide how long a grant lives.
func sceneURL(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme != "zookeeper" || u.Query().Has("session_timeout") {
		return rawURL
	}
	q := u.Query()
	q.Set("session_timeout", sceneSession.String())
	u.RawQuery = q.Encode()
	return u.String()
}

// serverLife is how long a paused server is kept stopped: a little longer
// than A's grant lives on it after its last renewal, so that the server
// finds it expired when it resumes.
func serverLife(rawURL string) time.Duration {
	if schemeOf(rawURL) == "zookeeper" {
		return sceneSession + 200*time.Millisecond
	}
	return sceneTTL(rawURL) + 200*time.Millisecond
}
