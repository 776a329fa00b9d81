package zookeeper

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errtext"
	"github.com/dlock-go/dlock/internal/redact"
	"github.com/dlock-go/dlock/internal/tlsconf"
	"github.com/dlock-go/dlock/lock"
)

// open is the OpenFunc for zookeeper:// URLs (see the package doc).
func open(ctx context.Context, u *url.URL) (driver.Driver, *lock.Options, error) {
	servers, o, err := parseURL(u)
	if err != nil {
		return nil, nil, err
	}
	return connect(context.Background(), servers, o) // no bound: connects in the background (see starter)
}

// parseURL reads zookeeper://[user:pass@]host[:port][,host[:port]...][/root][?params].
func parseURL(u *url.URL) ([]string, *Options, error) {
	bad := func(format string, args ...any) ([]string, *Options, error) {
		return nil, nil, fmt.Errorf("%w: zookeeper URL %s: %s", lock.ErrInvalid, errtext.Quote(redact.URL(u)), fmt.Sprintf(format, args...))
	}
	if u.Opaque != "" || u.Fragment != "" {
		return bad("want zookeeper://[user:pass@]host:port[,host:port...][/root]")
	}
	lo, params, err := lock.URLOptions(u, append([]string{"session_timeout"}, tlsconf.Params...)...)
	if err != nil {
		return nil, nil, err
	}
	if u.Query().Has("ttl") {
		// A grant lives as long as its session (see Sessions and TTLs):
		// a ttl here would be accepted and silently not kept.
		return bad("ttl is not used: a ZooKeeper grant lasts as long as its session; set session_timeout (such as session_timeout=%s) to bound how long a crashed holder keeps its keys", u.Query().Get("ttl"))
	}
	o := &Options{Options: *lo}
	if o.TLS, err = tlsconf.Parse(params, fmt.Sprintf("zookeeper URL %s", errtext.Quote(redact.URL(u)))); err != nil {
		return nil, nil, err
	}
	if v := params.Get("session_timeout"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return bad("session_timeout=%s: want a positive duration such as 10s", errtext.Quote(v))
		}
		if d < time.Millisecond || d > 24*time.Hour {
			return bad("session_timeout=%v is out of range [1ms, 24h]", d)
		}
		o.SessionTimeout = d
	}
	if u.Host == "" {
		return bad("no server")
	}
	var servers []string
	for _, h := range strings.Split(u.Host, ",") {
		if h == "" {
			return bad("empty server in %s", errtext.Quote(u.Host))
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			if strings.Contains(h, ":") {
				return bad("server %s: %s", errtext.Quote(h), errtext.Bound(err.Error()))
			}
			h = net.JoinHostPort(h, "2181")
		}
		servers = append(servers, h)
	}
	if u.User != nil {
		pw, ok := u.User.Password()
		if u.User.Username() == "" || !ok {
			return bad("digest authentication wants user:password@")
		}
		o.Username, o.Password = u.User.Username(), pw
	}
	if u.Path != "" && u.Path != "/" {
		o.Root = u.Path
		if err := checkRoot(o.Root); err != nil {
			return bad("%v", err)
		}
	}
	return servers, o, nil
}
