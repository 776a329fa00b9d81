package memcached

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errtext"
	"github.com/dlock-go/dlock/internal/redact"
	"github.com/dlock-go/dlock/internal/tlsconf"
	"github.com/dlock-go/dlock/lock"
)

func init() { lock.Register(Scheme, open) }

// defaultPort is memcached's port, used for servers given without one.
const defaultPort = "11211"

// ownedMaxIdleConns is MaxIdleConns of the clients Open makes: lock runs up
// to 16 refreshes at once, beside the caller's own calls.
const ownedMaxIdleConns = 16

// open is the OpenFunc for memcached://h1:11211[,h2:11211][?prefix=P&timeout=D&tls_...].
func open(ctx context.Context, u *url.URL) (driver.Driver, *lock.Options, error) {
	lo, params, err := lock.URLOptions(u, append([]string{"prefix", "timeout"}, tlsconf.Params...)...)
	if err != nil {
		return nil, nil, err
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: memcached URL %s: %s", lock.ErrInvalid, errtext.Quote(redact.URL(u)), fmt.Sprintf(format, args...))
	}
	switch {
	case u.Opaque != "":
		return nil, nil, bad("want memcached://host:port[,host:port...]")
	case u.User != nil:
		return nil, nil, bad("memcached's text protocol has no authentication; remove the user info")
	case u.Path != "" && u.Path != "/":
		return nil, nil, bad("unexpected path %s", errtext.Quote(u.Path))
	case u.Fragment != "":
		return nil, nil, bad("unexpected fragment")
	}
	addrs, err := serverAddrs(u.Host)
	if err != nil {
		return nil, nil, bad("%v", err)
	}
	if lo.TTL != 0 {
		if _, err := ttlSeconds(lo.TTL); err != nil {
			why := strings.TrimPrefix(err.Error(), driver.ErrInvalid.Error()+": ")
			return nil, nil, bad("ttl=%v: %s; use a ttl in [%v, %v]", lo.TTL, why, MinTTL, MaxTTL)
		}
	}
	o := &Options{Options: *lo, Prefix: params.Get("prefix")}
	if params.Has("prefix") {
		if o.Prefix == "" {
			return nil, nil, bad("empty prefix")
		}
		if err := checkPrefix(o.Prefix); err != nil {
			return nil, nil, bad("%v", err)
		}
	}
	timeout := time.Duration(0)
	if v := params.Get("timeout"); params.Has("timeout") {
		timeout, err = time.ParseDuration(v)
		if err != nil || timeout <= 0 {
			return nil, nil, bad("timeout=%s: want a positive duration such as 500ms", errtext.Quote(v))
		}
	}
	tc, err := tlsconf.Parse(params, fmt.Sprintf("memcached URL %s", errtext.Quote(redact.URL(u))))
	if err != nil {
		return nil, nil, err
	}
	ss := new(memcache.ServerList)
	if err := ss.SetServers(addrs...); err != nil {
		return nil, nil, fmt.Errorf("memcached: resolving %s: %w", strings.Join(addrs, ","), err)
	}
	c := memcache.NewFromSelector(ss)
	c.Timeout = timeout
	c.MaxIdleConns = ownedMaxIdleConns
	if tc != nil {
		// gomemcache dials the addresses it resolved: verify each server
		// by the host the URL gave for it.
		names := map[string]string{}
		i := 0
		ss.Each(func(a net.Addr) error {
			if host, _, err := net.SplitHostPort(addrs[i]); err == nil {
				names[a.String()] = host
			}
			i++
			return nil
		})
		c.DialContext = tlsDialer(tc, names)
	}
	d, lo := newDriverOptions(c, ss, o, true)
	return d, lo, nil
}

// serverAddrs splits a URL's host list, adding the default port where none
// is given.
func serverAddrs(hosts string) ([]string, error) {
	if hosts == "" {
		return nil, fmt.Errorf("no server given")
	}
	var addrs []string
	for _, h := range strings.Split(hosts, ",") {
		if h == "" {
			return nil, fmt.Errorf("empty server in the list %s", errtext.Quote(hosts))
		}
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			host, port = h, defaultPort
			if strings.Contains(strings.Trim(h, "[]"), ":") && !strings.HasPrefix(h, "[") {
				return nil, fmt.Errorf("server %s: %s", errtext.Quote(h), errtext.Bound(err.Error()))
			}
			host = strings.Trim(host, "[]")
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("server %s: bad port %s", errtext.Quote(h), errtext.Quote(port))
		}
		if host == "" {
			return nil, fmt.Errorf("server %s: no host", errtext.Quote(h))
		}
		addrs = append(addrs, net.JoinHostPort(host, port))
	}
	return addrs, nil
}

// tlsDialer returns a gomemcache DialContext that connects with TLS,
// within the context gomemcache gives it (its Timeout bounds the
// connection and the handshake). The name verified (and sent as SNI) is
// c.ServerName when set, else names[addr] (the host a URL gave for the
// server gomemcache resolved to addr), else addr's host.
func tlsDialer(c *tls.Config, names map[string]string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	byAddr := map[string]*tls.Config{}
	if c.ServerName == "" {
		for addr, name := range names {
			nc := c.Clone()
			nc.ServerName = name
			byAddr[addr] = nc
		}
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		cfg := c
		if nc, ok := byAddr[addr]; ok {
			cfg = nc
		}
		d := tls.Dialer{Config: cfg}
		return d.DialContext(ctx, network, addr)
	}
}
