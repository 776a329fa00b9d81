package etcd

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// TestAudit32PromptLogin: a URL Locker with a user is Prompt (its calls
// run on the caller's goroutine), so a call must return by its context's
// end while its log-in waits: the member is silent (a proxy holds every
// byte) at the Locker's first calls, which all wait for one Authenticate
// (the first sends it, the others wait for its slot). Close during the
// held log-in keeps its bound, and the Locker logs in once the member
// answers again.
func TestAudit32PromptLogin(t *testing.T) {
	prefix := fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())
	e := authEtcd(t, prefix)
	p := newDelayProxy(t, e.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	url := fmt.Sprintf("etcd://app:apppw@%s/%s?ttl=5s", p.addr(), prefix)
	rt := time.Second
	l, err := lock.OpenWith(ctx, url, &lock.Options{ReleaseTimeout: rt})
	if err != nil {
		t.Fatal(err)
	}
	p.hold()
	var wg sync.WaitGroup
	calls := []struct {
		name string
		f    func(context.Context) error
	}{
		{"TryLock", func(c context.Context) error { _, err := l.TryLock(c, "a"); return err }},
		{"Lock", func(c context.Context) error { _, err := l.Lock(c, "b"); return err }},
		{"RLock", func(c context.Context) error { _, err := l.RLock(c, "c"); return err }},
		{"Inspect", func(c context.Context) error { _, err := l.Inspect(c, "d"); return err }},
	}
	for _, c := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, ccancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer ccancel()
			start := time.Now()
			err := c.f(cctx)
			took := time.Since(start)
			t.Logf("%s: %v after %v", c.name, err, took.Round(time.Millisecond))
			if err == nil {
				t.Errorf("%s succeeded while the member is silent", c.name)
			}
			if took > 600*time.Millisecond {
				t.Errorf("%s took %v with a 300 ms context while its log-in waited", c.name, took)
			}
		}()
	}
	wg.Wait()
	p.release()
	lease, err := l.Lock(ctx, "e")
	if err != nil {
		t.Fatalf("Lock once the member answers: %v", err)
	}
	lease.Unlock(ctx)
	l.Close()

	// Close while the first log-in is held.
	l, err = lock.OpenWith(ctx, url, &lock.Options{ReleaseTimeout: rt})
	if err != nil {
		t.Fatal(err)
	}
	p.hold()
	defer p.release()
	go l.Lock(ctx, "f")
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	l.Close()
	if took := time.Since(start); took > rt+300*time.Millisecond {
		t.Errorf("Close took %v during a held log-in, want at most %v", took, rt+300*time.Millisecond)
	}
}
