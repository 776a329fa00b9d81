package etcd

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errtext"
	"github.com/dlock-go/dlock/internal/redact"
	"github.com/dlock-go/dlock/internal/tlsconf"
	"github.com/dlock-go/dlock/lock"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Scheme is the URL scheme this package registers with lock.Open.
const Scheme = "etcd"

func init() {
	lock.Register(Scheme, open)
}

// DialTimeout bounds the connection of a client made from a URL, and so
// a call while no member is reachable.
const DialTimeout = 5 * time.Second

// keepAliveTime and keepAliveTimeout are the gRPC keep-alive of a client
// made from a URL: while a request or the watch stream is open on a
// member's connection, a ping unanswered for keepAliveTimeout after
// keepAliveTime without news closes the connection, so that a member
// that went silent with its connection open (a paused process, a cut
// link) leaves the round-robin until it answers again. keepAliveTime is
// gRPC's least; a client given to New keeps its own settings.
const (
	keepAliveTime    = 10 * time.Second
	keepAliveTimeout = 3 * time.Second
)

// open is the OpenFunc for etcd://[user:password@]host[:port][,host[:port]...][/prefix][?params].
// It makes no connection: the client is made at the Locker's first call.
func open(ctx context.Context, u *url.URL) (driver.Driver, *lock.Options, error) {
	cfg, o, err := parseURL(u)
	if err != nil {
		return nil, nil, err
	}
	d, lo := newDriver(o)
	d.cfg, d.owned = cfg, true
	return d, lo, nil
}

// parseURL reads an etcd:// URL into the client's configuration and the
// Locker's options.
func parseURL(u *url.URL) (*clientv3.Config, *Options, error) {
	bad := func(format string, args ...any) (*clientv3.Config, *Options, error) {
		return nil, nil, fmt.Errorf("%w: etcd URL %s: %s", lock.ErrInvalid, errtext.Quote(redact.URL(u)), fmt.Sprintf(format, args...))
	}
	if u.Opaque != "" || u.Fragment != "" {
		return bad("want etcd://[user:password@]host:port[,host:port...][/prefix]")
	}
	lo, params, err := lock.URLOptions(u, tlsconf.Params...)
	if err != nil {
		return nil, nil, err
	}
	tc, err := tlsconf.Parse(params, fmt.Sprintf("etcd URL %s", errtext.Quote(redact.URL(u))))
	if err != nil {
		return nil, nil, err
	}
	if u.Host == "" {
		return bad("no server")
	}
	scheme := "http://"
	if tc != nil {
		scheme = "https://"
	}
	cfg := &clientv3.Config{
		DialTimeout: DialTimeout, TLS: tc, Logger: zap.NewNop(),
		DialKeepAliveTime: keepAliveTime, DialKeepAliveTimeout: keepAliveTimeout,
	}
	for _, h := range strings.Split(u.Host, ",") {
		if h == "" {
			return bad("empty server in %s", errtext.Quote(u.Host))
		}
		if _, port, err := net.SplitHostPort(h); err != nil {
			if strings.Contains(h, ":") && !strings.HasPrefix(h, "[") {
				return bad("server %s: %s", errtext.Quote(h), errtext.Bound(err.Error()))
			}
			h = net.JoinHostPort(strings.Trim(h, "[]"), "2379")
		} else if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
			// url.Parse checks only the port after the last colon.
			return bad("server %s: the port must be a number from 1 to 65535", errtext.Quote(h))
		}
		cfg.Endpoints = append(cfg.Endpoints, scheme+h)
	}
	if u.User != nil {
		pw, ok := u.User.Password()
		if u.User.Username() == "" || !ok {
			return bad("authentication wants user:password@")
		}
		cfg.Username, cfg.Password = u.User.Username(), pw
	}
	o := &Options{Options: *lo}
	if p := strings.TrimPrefix(u.Path, "/"); p != "" {
		if !strings.HasSuffix(p, "/") {
			p += "/"
		}
		o.Prefix = p
	}
	return cfg, o, nil
}
