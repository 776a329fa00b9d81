package rediswatch

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

func init() {
	lock.Register(Scheme, open)
	lock.Register(SchemeTLS, open)
}

// open makes a Locker, and the client it owns, from a URL; see the package
// doc's URLs section.
func open(ctx context.Context, u *url.URL) (driver.Driver, *lock.Options, error) {
	lo, q, err := lock.URLOptions(u, "prefix", "tls", "cluster")
	if err != nil {
		return nil, nil, err
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s URL %q: %s", lock.ErrInvalid, u.Scheme, u.Redacted(), fmt.Sprintf(format, args...))
	}
	o := &Options{Options: *lo}
	if p, ok := q["prefix"]; ok {
		switch {
		case p[0] == "":
			return nil, nil, bad("empty prefix (leave the parameter out for the default %q)", DefaultPrefix)
		case strings.ContainsAny(p[0], "{}"):
			return nil, nil, bad("prefix %q contains \"{\" or \"}\"", p[0])
		}
		o.Prefix = p[0]
	}
	useTLS := u.Scheme == SchemeTLS
	if v := q.Get("tls"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, nil, bad("tls=%q: want true or false", v)
		}
		if !b && useTLS {
			return nil, nil, bad("tls=false contradicts the %s scheme", SchemeTLS)
		}
		useTLS = b
	}
	cluster := false
	if v := q.Get("cluster"); v != "" {
		if cluster, err = strconv.ParseBool(v); err != nil {
			return nil, nil, bad("cluster=%q: want true or false", v)
		}
	}
	if u.Opaque != "" || u.Fragment != "" {
		return nil, nil, bad("want %s://[user:password@]host:port[,host:port...][/db]", u.Scheme)
	}
	var addrs []string
	for _, h := range strings.Split(u.Host, ",") {
		if h == "" {
			return nil, nil, bad("empty host")
		}
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			if !strings.Contains(err.Error(), "missing port") {
				return nil, nil, bad("host %q: %v", h, err)
			}
			host, port = strings.Trim(h, "[]"), "6379"
		}
		if host == "" {
			return nil, nil, bad("host %q has no name", h)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, nil, bad("host %q: bad port", h)
		}
		addrs = append(addrs, net.JoinHostPort(host, port))
	}
	cluster = cluster || len(addrs) > 1
	db := 0
	if p := strings.TrimPrefix(u.Path, "/"); p != "" {
		if db, err = strconv.Atoi(p); err != nil || db < 0 {
			return nil, nil, bad("path %q: want /DB, a database number", u.Path)
		}
		if cluster && db != 0 {
			return nil, nil, bad("a Redis Cluster has only database 0")
		}
	}
	var user, pass string
	if u.User != nil {
		user = u.User.Username()
		pass, _ = u.User.Password()
	}
	var tc *tls.Config
	if useTLS {
		// No ServerName: go-redis dials with tls.DialWithDialer, which
		// verifies each node's certificate against its own host name.
		tc = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	var client redis.UniversalClient
	if cluster {
		client = redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: addrs, Username: user, Password: pass, TLSConfig: tc,
			ContextTimeoutEnabled: true,
		})
	} else {
		client = redis.NewClient(&redis.Options{
			Addr: addrs[0], Username: user, Password: pass, DB: db, TLSConfig: tc,
			ContextTimeoutEnabled: true,
		})
	}
	d, lo := newDriverOptions(client, o, true)
	return d, lo, nil
}
