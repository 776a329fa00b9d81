package memcached

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/dlock-go/dlock/lock"
)

func TestOpenURLs(t *testing.T) {
	ctx := context.Background()
	for _, u := range []string{
		"memcached://127.0.0.1:11211",
		"memcached://127.0.0.1:11211,127.0.0.1:11212/",
		"memcached://127.0.0.1",
		"memcached://[::1]:11211",
		"memcached://localhost:11211?prefix=app:&timeout=250ms&ttl=10s&autorenew=false",
		"memcached://localhost:11211?tls_insecure_skip_verify=true&tls_server_name=cache.example",
	} {
		l, err := lock.Open(ctx, u)
		if err != nil {
			t.Errorf("Open(%q): %v", u, err)
			continue
		}
		var c *memcache.Client
		if !l.As(&c) || c == nil {
			t.Errorf("Open(%q): lock.As gave no client", u)
		}
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
	for _, u := range []string{
		"memcached://",
		"memcached://h1:11211,,h2:11211",
		"memcached://h1:0",
		"memcached://h1:99999",
		"memcached://h1:port",
		"memcached://:11211",
		"memcached://user:pass@h1:11211",
		"memcached://h1:11211/path",
		"memcached://h1:11211?unknown=1",
		"memcached://h1:11211?prefix=",
		"memcached://h1:11211?prefix=a%20b",
		"memcached://h1:11211?timeout=0s",
		"memcached://h1:11211?timeout=soon",
		"memcached://h1:11211?ttl=1s&ttl=2s",
		"memcached://h1:11211?ttl=1s", // shorter than MinTTL
		"memcached://h1:11211?ttl=2999ms",
		"memcached://h1:11211?ttl=721h", // longer than MaxTTL
		"memcached:h1:11211",
		"memcached://h1:11211?tls_ca=/nonexistent/ca.pem",
		"memcached://h1:11211?tls_cert=/nonexistent/c.pem",
		"memcached://h1:11211?tls_insecure_skip_verify=maybe",
		"memcached://h1:11211?tls_server_name=",
	} {
		l, err := lock.Open(ctx, u)
		if !errors.Is(err, lock.ErrInvalid) {
			t.Errorf("Open(%q): err = %v, want ErrInvalid", u, err)
		}
		if l != nil {
			l.Close()
		}
	}
}

func TestServerAddrs(t *testing.T) {
	got, err := serverAddrs("a:1,b,[::1],[::1]:2")
	want := []string{"a:1", "b:11211", "[::1]:11211", "[::1]:2"}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("serverAddrs = %q, %v; want %q", got, err, want)
	}
}

// TestOpenRefusesShortTTL: a ttl= memcached cannot keep is refused at
// Open, not at the first Lock, and the error says what to use.
func TestOpenRefusesShortTTL(t *testing.T) {
	_, err := lock.Open(context.Background(), "memcached://127.0.0.1:11211?ttl=1s")
	if !errors.Is(err, lock.ErrInvalid) || !strings.Contains(err.Error(), "use a ttl in [3s,") {
		t.Errorf("Open with ttl=1s: %v; want ErrInvalid saying the range", err)
	}
}
