//go:build demo

package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// serverKind is a server the demo can start.
type serverKind string

const (
	serverRedis     serverKind = "redis"
	serverMemcached serverKind = "memcached"
	serverZooKeeper serverKind = "zookeeper"
	serverPostgres  serverKind = "postgres"
	serverEtcd      serverKind = "etcd"
)

// netBackend is a network scheme the demo knows: where its server listens
// by default and how to build its URL for servers the demo started.
type netBackend struct {
	scheme     string
	alias      string // another scheme of the same driver, or ""
	server     serverKind
	defaultURL string
	urlFor     func(s startedServer) string
}

// netBackends: PostgreSQL's default URL names no user nor password, which
// pgx then takes from PGUSER (else the system user) and PGPASSWORD (else
// ~/.pgpass), as psql does.
var netBackends = []netBackend{
	{scheme: "redisnx", server: serverRedis, defaultURL: "redisnx://localhost:6379",
		urlFor: func(s startedServer) string { return "redisnx://" + s.addrs[0] }},
	{scheme: "rediswatch", server: serverRedis, defaultURL: "rediswatch://localhost:6379",
		urlFor: func(s startedServer) string { return "rediswatch://" + s.addrs[0] }},
	{scheme: "memcached", server: serverMemcached, defaultURL: "memcached://localhost:11211",
		urlFor: func(s startedServer) string { return "memcached://" + strings.Join(s.addrs, ",") }},
	{scheme: "zookeeper", server: serverZooKeeper, defaultURL: "zookeeper://localhost:2181/dlock-demo",
		urlFor: func(s startedServer) string { return "zookeeper://" + strings.Join(s.addrs, ",") + "/dlock-demo" }},
	{scheme: "postgres", alias: "postgresql", server: serverPostgres, defaultURL: "postgres://localhost:5432/postgres",
		urlFor: func(s startedServer) string { return s.url }},
	{scheme: "etcd", server: serverEtcd, defaultURL: "etcd://localhost:2379",
		urlFor: func(s startedServer) string { return "etcd://" + strings.Join(s.addrs, ",") }},
}

// startedServer is a server the demo started: its addresses, its URL
// where addresses do not say how to connect (PostgreSQL's, with the
// superuser's name and password), and how to pause it (nil if it cannot
// be).
type startedServer struct {
	addrs []string
	url   string
	pause pauser
}

// compiledIn returns the network backends whose driver is in this binary.
func compiledIn() []netBackend {
	var out []netBackend
	for _, b := range netBackends {
		if slices.Contains(lock.Schemes(), b.scheme) {
			out = append(out, b)
		}
	}
	return out
}

// backendOf returns the compiled-in network backend of scheme (or of
// its alias: postgresql is postgres).
func backendOf(scheme string) (netBackend, bool) {
	for _, b := range compiledIn() {
		if scheme != "" && (b.scheme == scheme || b.alias == scheme) {
			return b, true
		}
	}
	return netBackend{}, false
}

// target is one backend the demo runs against.
type target struct {
	name, url string
	pause     pauser // the server, where the demo started it; else nil
}

// probe checks that a backend answers: a TCP dial to one of its hosts
// first (fast and clear when nothing listens), then a grant and a release.
func probe(ctx context.Context, raw string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	if hosts := strings.Split(u.Host, ","); u.Host != "" {
		var derr error
		for _, h := range hosts {
			if _, _, err := net.SplitHostPort(h); err != nil {
				h = withDefaultPort(u.Scheme, h)
			}
			var c net.Conn
			if c, derr = (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", h); derr == nil {
				c.Close()
				break
			}
		}
		if derr != nil {
			return derr
		}
	}
	errc := make(chan error, 1)
	go func() { // bounded by ctx even if a driver ignored it
		l, err := lock.Open(ctx, raw)
		if err != nil {
			errc <- err
			return
		}
		defer l.Close()
		lease, err := l.TryLock(ctx, "dlock-demo/probe/"+randomID(), lock.WithTTL(5*time.Second))
		if err != nil {
			errc <- err
			return
		}
		errc <- lease.Unlock(ctx)
	}()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return fmt.Errorf("no answer within 5s: %w", ctx.Err())
	}
}

// withDefaultPort adds to host (without a port) the port of scheme's
// default URL: postgres://db/app is db:5432.
func withDefaultPort(scheme, host string) string {
	b, ok := backendOf(scheme)
	if !ok {
		return host
	}
	d, err := url.Parse(b.defaultURL)
	if err != nil || d.Port() == "" {
		return host
	}
	return net.JoinHostPort(strings.Trim(host, "[]"), d.Port())
}

func randomID() string {
	b := make([]byte, 4)
	rand.Read(b)
	return hex.EncodeToString(b)
}
