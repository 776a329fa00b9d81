package redisnx

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

// URL schemes this package registers with lock.Open: SchemeTLS is Scheme
// over TLS.
const (
	Scheme    = "redisnx"
	SchemeTLS = "redisnxs"
)

func init() {
	lock.Register(Scheme, open)
	lock.Register(SchemeTLS, open)
}

// urlParams are the query parameters of this driver's URLs.
var urlParams = []string{"prefix", "tls", "cluster"}

func open(ctx context.Context, u *url.URL) (driver.Driver, *lock.Options, error) {
	lo, q, err := lock.URLOptions(u, urlParams...)
	if err != nil {
		return nil, nil, err
	}
	c, err := parseURL(u, q)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: redisnx URL %q: %v", lock.ErrInvalid, u.Redacted(), err)
	}
	o := &Options{Options: *lo, Prefix: c.prefix}
	var client redis.UniversalClient
	if c.cluster {
		client = redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: c.addrs, Username: c.user, Password: c.password, TLSConfig: c.tls,
			ContextTimeoutEnabled: true, // a Lock's deadline bounds a request in flight
		})
	} else {
		client = redis.NewClient(&redis.Options{
			Addr: c.addrs[0], Username: c.user, Password: c.password, DB: c.db, TLSConfig: c.tls,
			ContextTimeoutEnabled: true, // a Lock's deadline bounds a request in flight
		})
	}
	d, dlo := newDriverOptions(client, o, true)
	return d, dlo, nil
}

// clientConfig is what a URL says about the client to make.
type clientConfig struct {
	addrs          []string
	user, password string
	db             int
	cluster        bool
	tls            *tls.Config
	prefix         string
}

func parseURL(u *url.URL, q url.Values) (*clientConfig, error) {
	c := &clientConfig{}
	if u.Opaque != "" || u.Fragment != "" || u.RawFragment != "" {
		return nil, fmt.Errorf("want %s://[user:password@]host:port[,host:port...][/db][?params]", u.Scheme)
	}
	if u.User != nil {
		c.user = u.User.Username()
		c.password, _ = u.User.Password()
	}
	host := u.Host
	if host == "" {
		host = "localhost:6379"
	}
	for _, a := range strings.Split(host, ",") {
		h, p, err := net.SplitHostPort(a)
		if err != nil {
			// No port: the default one.
			h, p, err = net.SplitHostPort(net.JoinHostPort(a, "6379"))
		}
		if n, perr := strconv.ParseUint(p, 10, 16); err != nil || h == "" || perr != nil || n == 0 {
			return nil, fmt.Errorf("bad address %q: want host:port", a)
		}
		c.addrs = append(c.addrs, net.JoinHostPort(h, p))
	}
	if db := strings.TrimPrefix(u.Path, "/"); db != "" {
		n, err := strconv.Atoi(db)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("bad database %q: want a number", db)
		}
		c.db = n
	}

	c.cluster = len(c.addrs) > 1
	if v := q.Get("cluster"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("cluster=%q: want true or false", v)
		}
		if !b && c.cluster {
			return nil, fmt.Errorf("cluster=false with %d addresses", len(c.addrs))
		}
		c.cluster = b
	}
	if c.cluster && c.db != 0 {
		return nil, fmt.Errorf("a Redis Cluster has only database 0")
	}

	useTLS := u.Scheme == SchemeTLS
	if v := q.Get("tls"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("tls=%q: want true or false", v)
		}
		if !b && useTLS {
			return nil, fmt.Errorf("tls=false with scheme %s", SchemeTLS)
		}
		useTLS = b
	}
	if useTLS {
		// No ServerName: the dialer verifies each server by its own host.
		c.tls = &tls.Config{MinVersion: tls.VersionTLS12}
	}

	c.prefix = DefaultPrefix
	if q.Has("prefix") {
		c.prefix = q.Get("prefix")
		if c.prefix == "" {
			return nil, fmt.Errorf("prefix= is empty")
		}
		if strings.ContainsAny(c.prefix, "{}") {
			return nil, fmt.Errorf("prefix %q contains '{' or '}'", c.prefix)
		}
	}
	return c, nil
}
