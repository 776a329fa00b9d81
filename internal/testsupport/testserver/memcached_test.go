package testserver

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
)

func memcacheClient(addr string) *memcache.Client {
	c := memcache.New(addr)
	c.Timeout = 300 * time.Millisecond
	return c
}

func TestMemcached(t *testing.T) {
	t.Parallel()
	m := StartMemcached(t, &MemcachedOptions{Servers: 2, MemoryMB: 8, NoEvict: true})
	m.RequireFaults(t)
	if len(m.Addrs()) != 2 || m.Addrs()[0] == m.Addrs()[1] {
		t.Fatalf("addrs %v, want two distinct", m.Addrs())
	}
	ctx := context.Background()
	for _, a := range m.Addrs() {
		settings, err := textDo(ctx, a, "stats settings\r\n", func(r string) bool { return strings.HasSuffix(r, "END\r\n") })
		must(t, err)
		if !strings.Contains(settings, "STAT maxbytes 8388608\r\n") || !strings.Contains(settings, "STAT evictions off\r\n") {
			t.Fatalf("%s: options not applied:\n%s", a, settings)
		}
	}

	n0 := m.Node(0)
	c := memcacheClient(n0.Addr())
	must(t, c.Set(&memcache.Item{Key: "k", Value: []byte("v")}))

	must(t, n0.Pause())
	if _, err := c.Get("k"); !isTimeout(err) {
		t.Fatalf("get while paused: got %v, want a timeout", err)
	}
	// The other server is unaffected.
	must(t, memcacheClient(m.Node(1).Addr()).Set(&memcache.Item{Key: "k", Value: []byte("v1")}))
	must(t, n0.Resume())
	if it, err := c.Get("k"); err != nil || string(it.Value) != "v" {
		t.Fatalf("get after resume: %v, %v", it, err)
	}

	must(t, n0.Kill())
	requireRefused(t, n0.Addr())
	must(t, n0.Restart())
	c = memcacheClient(n0.Addr()) // the old client's pooled connection died with the server
	if _, err := c.Get("k"); !errors.Is(err, memcache.ErrCacheMiss) {
		t.Fatalf("get after restart: got %v, want a cache miss", err)
	}
}

func TestSharedMemcached(t *testing.T) {
	t.Parallel()
	m := SharedMemcached(t)
	must(t, memcacheClient(m.Addr()).Set(&memcache.Item{Key: "shared", Value: []byte("x")}))
	if err := m.Kill(); !errors.Is(err, ErrNoFaults) {
		t.Fatalf("Kill on shared instance: got %v, want ErrNoFaults", err)
	}
}
