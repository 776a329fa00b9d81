package lock_test

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/lock"
)

func init() {
	lock.Register("faketest", func(ctx context.Context, u *url.URL) (driver.Driver, *lock.Options, error) {
		o, rest, err := lock.URLOptions(u, "flavour")
		if err != nil {
			return nil, nil, err
		}
		if f := rest.Get("flavour"); f != "" && f != "plain" {
			return nil, nil, errors.New("bad flavour")
		}
		return newFake(), o, nil
	})
}

func TestOpen(t *testing.T) {
	l, err := lock.Open(context.Background(), "faketest://?ttl=2s&autorenew=false&flavour=plain")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lease, err := l.Lock(bg(t), "k")
	if err != nil {
		t.Fatal(err)
	}
	if lease.TTL() != 2*time.Second {
		t.Errorf("TTL %v; want 2s from the URL", lease.TTL())
	}
}

func TestOpenErrors(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"faketest://?tll=2s", `unknown URL parameter "tll"`},
		{"faketest://?ttl=forever", "ttl"},
		{"faketest://?ttl=1ns", "out of range"},
		{"faketest://?autorenew=maybe", "autorenew"},
		{"faketest://?ttl=1s&ttl=2s", "given 2 times"},
		{"nosuch://host", `dlock's drivers: memory, redisnx, rediswatch, memcached, zookeeper, postgres, etcd`},
		{"etcd://host", `import _ "github.com/dlock-go/dlock/driver/etcd" (a module of its own: go get github.com/dlock-go/dlock/driver/etcd)`},
		{"redisnxs://host", `import _ "github.com/dlock-go/dlock/driver/redisnx"`},
		{"zookeeper://host", `import _ "github.com/dlock-go/dlock/driver/zookeeper"`},
		{"postgresql://host", `import _ "github.com/dlock-go/dlock/driver/postgres"`},
		{"://bad", "malformed URL"},
		{"no-scheme", "no scheme"},
		{"faketest://?a=%zz", "query"},
	} {
		_, err := lock.Open(context.Background(), tc.url)
		if !errors.Is(err, lock.ErrInvalid) {
			t.Errorf("Open(%q): err = %v; want ErrInvalid", tc.url, err)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%q): err = %q; want it to mention %q", tc.url, err, tc.want)
		}
	}
}

// TestOpenErrorsHidePasswords: net/url's errors quote the URL whole; Open's
// must not repeat a secret of a URL it cannot parse (the user info's
// password, a password parameter), nor a piece of one.
func TestOpenErrorsHidePasswords(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"redisnx://u:s3cret@[::1", `"redisnx://u:xxxxx@[::1"`},
		{"redisnx://u:s3cret@h/%zz", `"redisnx://u:xxxxx@h/%zz"`},
		{"redisnx://u:s3cret@h:1:x/0", "xxxxx"},
		{"u:s3cret@127.0.0.1:6379", "unknown URL scheme"}, // scheme "u"
		{"faketest://u:s3cret@h?a=%zz", "query"},
		{"nosuch://u:s3cret@h", "unknown URL scheme"},
		// An unescaped '#' or '/' in the password: net/url's reason would
		// quote its first part as a port.
		{"redisnx://u:s3c#ret@h:1", `"redisnx://u:xxxxx@h:1": a password is malformed`},
		{"redisnx://u:s3c/ret@h:1?password=s3cret", `"redisnx://u:xxxxx@h:1?password=xxxxx": a password is malformed`},
		{"redisnx://h:x?password=s3cret", `"redisnx://h:x?password=xxxxx": invalid port ":x" after host`},
		{"redisnx:u:s3cret@h", "unknown URL scheme"},
	} {
		_, err := lock.Open(context.Background(), tc.url)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "s3c") {
			t.Errorf("Open(%q): %v; want an error with %q and without the password", tc.url, err, tc.want)
		}
	}
}

func TestRegisterTwicePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("second Register of a scheme did not panic")
		}
	}()
	lock.Register("faketest", func(context.Context, *url.URL) (driver.Driver, *lock.Options, error) { return nil, nil, nil })
}

// syncLog is a log destination safe to read while the Locker writes it.
type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (w *syncLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncLog) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

func TestOpenWith(t *testing.T) {
	var logged syncLog
	logger := slog.New(slog.NewTextHandler(&logged, nil))
	l, err := lock.OpenWith(context.Background(), "faketest://?ttl=300ms", &lock.Options{Logger: logger, Retry: lock.NoRetry()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var f *fake
	if !l.As(&f) {
		t.Fatal("As did not reach the fake driver")
	}
	lease, err := l.Lock(bg(t), "k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Lock(bg(t), "k"); !errors.Is(err, lock.ErrHeld) {
		t.Errorf("Lock with NoRetry from OpenWith on a held key: %v; want ErrHeld at once", err)
	}
	f.del("k") // the next renewal finds the grant gone and logs the loss
	<-lease.Done()
	// The loss is logged right after Done closes: wait for it.
	for deadline := time.Now().Add(2 * time.Second); !strings.Contains(logged.String(), "lease lost") && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if !strings.Contains(logged.String(), "lease lost") {
		t.Errorf("the Logger given to OpenWith logged %q; want the lost lease", logged.String())
	}
}
