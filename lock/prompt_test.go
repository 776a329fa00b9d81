package lock_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/lock"
)

// promptFake is a fake that says its calls return by their context's end
// (driver.Caps.ReturnsAtContextEnd), so lock makes them on the caller's goroutine. Its
// Acquire can also grant after its context ended (lateGrant): a reply
// that came just too late.
type promptFake struct {
	*fake
	lateGrant bool
	stacks    chan string   // the stack of each Acquire, when not nil
	hang      chan struct{} // when not nil, Acquire closes it and waits for its context's end
}

func (p *promptFake) Capabilities() driver.Caps {
	return driver.Caps{ReturnsAtContextEnd: true}
}

func (p *promptFake) Acquire(ctx context.Context, l *driver.Lease) error {
	if p.stacks != nil {
		buf := make([]byte, 1<<16)
		p.stacks <- string(buf[:runtime.Stack(buf, false)])
	}
	if p.hang != nil {
		close(p.hang)
		<-ctx.Done()
		return ctx.Err()
	}
	if p.lateGrant {
		<-ctx.Done()
		p.lateGrant = false
		return p.fake.Acquire(context.Background(), l) // applied, but after the caller's end
	}
	return p.fake.Acquire(ctx, l)
}

var _ driver.Capable = (*promptFake)(nil)

// TestPromptCallsRunOnCallersGoroutine: a ReturnsAtContextEnd driver's calls are made
// on the caller's goroutine, with no hand-off to one of lock's (whose
// stack would not hold the caller's frames).
func TestPromptCallsRunOnCallersGoroutine(t *testing.T) {
	p := &promptFake{fake: newFake(), stacks: make(chan string, 1)}
	l := lock.New(p, nil)
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lease, err := l.TryLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Unlock(ctx)
	if st := <-p.stacks; !strings.Contains(st, "TestPromptCallsRunOnCallersGoroutine") {
		t.Errorf("Acquire ran on another goroutine than TryLock's caller:\n%s", st)
	}
}

// TestPromptCallEndedByClose: Close ends the context of a call under way,
// so that a ReturnsAtContextEnd driver's call, made on the caller's
// goroutine with no hand-off to abandon, returns (with ErrClosed) though
// the caller's own context never ends.
func TestPromptCallEndedByClose(t *testing.T) {
	p := &promptFake{fake: newFake(), hang: make(chan struct{})}
	l := lock.New(p, nil)
	returned := make(chan error, 1)
	go func() {
		_, err := l.TryLock(context.Background(), "k")
		returned <- err
	}()
	<-p.hang
	l.Close()
	select {
	case err := <-returned:
		if !errors.Is(err, lock.ErrClosed) {
			t.Errorf("TryLock under way at Close: err = %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("TryLock under way still blocked 10s after Close returned")
	}
}

// TestPromptLateGrantReleased: a ReturnsAtContextEnd driver's call that returns after
// its context ended is treated as one the caller gave up on: the caller
// gets the context's error at once, and a grant the call made is released
// in the background, as after a hand-off.
func TestPromptLateGrantReleased(t *testing.T) {
	p := &promptFake{fake: newFake(), lateGrant: true}
	l := lock.New(p, nil)
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := l.TryLock(ctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("TryLock whose grant came after its context's end: err = %v, want DeadlineExceeded", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for p.holder("k") != "" {
		if time.Now().After(deadline) {
			t.Fatalf("the grant made after TryLock gave up is still held by %q: never released", p.holder("k"))
		}
		time.Sleep(5 * time.Millisecond)
	}
}
