package main

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
)

// netBackend is a network scheme the demo knows: where its server listens
// by default and how to build its URL for servers the demo started.
type netBackend struct {
	scheme     string
	server     serverKind
	defaultURL string
	urlFor     func(addrs []string) string
}

var netBackends = []netBackend{
	{"redisnx", serverRedis, "redisnx://localhost:6379", func(a []string) string { return "redisnx://" + a[0] }},
	{"rediswatch", serverRedis, "rediswatch://localhost:6379", func(a []string) string { return "rediswatch://" + a[0] }},
	{"memcached", serverMemcached, "memcached://localhost:11211", func(a []string) string { return "memcached://" + strings.Join(a, ",") }},
	{"zookeeper", serverZooKeeper, "zookeeper://localhost:2181/dlock-demo", func(a []string) string { return "zookeeper://" + strings.Join(a, ",") + "/dlock-demo" }},
}

// startedServer is a server the demo started: its addresses, and how to
// pause it (nil if it cannot be).
type startedServer struct {
	addrs []string
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

// compiledURLs lists the compiled-in network schemes as URL prefixes
// (redisnx://, ...), for messages.
func compiledURLs() []string {
	var s []string
	for _, b := range compiledIn() {
		s = append(s, b.scheme+"://")
	}
	return s
}

// target is one backend the demo runs against.
type target struct {
	name, url string
	pause     pauser // the server, where the demo started it; else nil
}

func schemeOf(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Scheme
	}
	return ""
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

func randomID() string {
	b := make([]byte, 4)
	rand.Read(b)
	return hex.EncodeToString(b)
}
