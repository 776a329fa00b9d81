// Package redisx is what the Redis drivers (redisnx, rediswatch) share, so
// that it is written once: the names of a lock on the server and their
// Cluster slot (a wire contract between the two drivers, and with the plain
// SET NX locks of redsync and redislock), the client a URL makes, the
// client's life (Core), the pub/sub notifier and context handling. The
// design, and why, is in docs/design.md; the wire format in
// docs/wire/redis.md.
//
// Parse reads a dlock Redis URL with go-redis's own parsers
// (redis.ParseURL, ParseClusterURL, ParseFailoverURL), so that one URL
// means one client for both drivers and every parameter go-redis documents
// works. It reads ttl and autorenew (lock's), prefix, cluster, tls and
// the TLS parameters every driver shares (internal/tlsconf: tls_ca,
// tls_cert, tls_key, tls_server_name, tls_insecure_skip_verify; any of
// them turns TLS on, as the TLS scheme does) itself; several hosts or cluster=true make a Cluster client, and
// master_name a Sentinel failover client whose hosts are the Sentinels (the
// user info authenticates to them, username= and password= to the primary,
// which takes the user info's when neither is given). An
// unknown or repeated parameter is an error wrapping lock.ErrInvalid that
// lists the known ones. Clients made here have ContextTimeoutEnabled set,
// so that a call's deadline bounds a request in flight, and log through
// the Locker's Options.Logger or not at all (log.go).
package redisx

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/dlock-go/dlock/internal/errtext"
	"github.com/dlock-go/dlock/internal/redact"
	"github.com/dlock-go/dlock/internal/tlsconf"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// Params are the query parameters this package reads besides lock's.
var Params = append([]string{"prefix", "cluster", "tls"}, tlsconf.Params...)

// Kind is the kind of client a URL makes.
type Kind int

const (
	Single   Kind = iota // redis.NewClient
	Cluster              // redis.NewClusterClient
	Failover             // redis.NewFailoverClient (Sentinel)
)

// Config is what a URL says. Exactly one of Single, Cluster and Failover
// is set, as Kind says.
type Config struct {
	Kind     Kind
	Single   *redis.Options
	Cluster  *redis.ClusterOptions
	Failover *redis.FailoverOptions
	// Options are lock's (ttl, autorenew).
	Options *lock.Options
	// Prefix is the prefix= parameter, "" when not given.
	Prefix string
}

// NewClient makes the client c describes.
func (c *Config) NewClient() redis.UniversalClient {
	switch c.Kind {
	case Cluster:
		return redis.NewClusterClient(c.Cluster)
	case Failover:
		return redis.NewFailoverClient(c.Failover)
	}
	return redis.NewClient(c.Single)
}

// Parse reads u, whose scheme is the driver's plain or TLS scheme.
// Failures wrap lock.ErrInvalid.
func Parse(u *url.URL, tlsScheme string) (*Config, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s URL %s: %s", lock.ErrInvalid, u.Scheme, errtext.Quote(redact.URL(u)), fmt.Sprintf(format, args...))
	}
	if u.Opaque != "" || u.Fragment != "" || u.RawFragment != "" {
		return nil, bad("want %s://[user:password@][host][:port][,host:port...][/db][?params]", u.Scheme)
	}
	own, theirs, err := splitQuery(u.RawQuery, bad)
	if err != nil {
		return nil, err
	}
	lu := *u
	lu.RawQuery = own.Encode()
	lo, ownq, err := lock.URLOptions(&lu, Params...)
	if err != nil {
		return nil, err
	}
	c := &Config{Options: lo}
	if c.Prefix, err = parsePrefix(ownq, bad); err != nil {
		return nil, err
	}
	useTLS, tc, err := parseTLS(u, tlsScheme, ownq, theirs, bad)
	if err != nil {
		return nil, err
	}
	hosts, err := parseHosts(u, theirs, bad)
	if err != nil {
		return nil, err
	}
	c.Kind, err = parseKind(ownq, theirs, len(hosts)-1+len(theirs["addr"]), bad)
	if err != nil {
		return nil, err
	}
	gu := url.URL{Scheme: "redis", User: u.User, Host: hosts[0], Path: u.Path, RawPath: u.RawPath}
	if useTLS {
		gu.Scheme = "rediss"
	}
	for _, h := range hosts[1:] {
		theirs.Add("addr", h)
	}
	gu.RawQuery = theirs.Encode()
	if err := c.goRedis(gu, theirs, bad); err != nil {
		return nil, err
	}
	if tc != nil {
		overlay(c.tlsConfig(), tc)
	}
	return c, nil
}

// splitQuery splits a URL's query into the parameters dlock reads (own)
// and go-redis's (theirs). Only addr may repeat.
func splitQuery(raw string, bad func(string, ...any) error) (own, theirs url.Values, err error) {
	q, err := url.ParseQuery(raw)
	if err != nil {
		return nil, nil, bad("query: %v", err)
	}
	own, theirs = url.Values{}, url.Values{}
	for name, vals := range q {
		if len(vals) > 1 && name != "addr" {
			return nil, nil, bad("parameter %s given %d times", errtext.Quote(name), len(vals))
		}
		if name == "ttl" || name == "autorenew" || slices.Contains(Params, name) {
			own[name] = vals
		} else {
			theirs[name] = vals
		}
	}
	return own, theirs, nil
}

// parsePrefix reads prefix=, "" when not given.
func parsePrefix(ownq url.Values, bad func(string, ...any) error) (string, error) {
	if !ownq.Has("prefix") {
		return "", nil
	}
	prefix := ownq.Get("prefix")
	switch {
	case prefix == "":
		return "", bad("empty prefix (leave the parameter out for the default)")
	case strings.ContainsAny(prefix, "{}"):
		return "", bad("prefix %s contains '{' or '}'", errtext.Quote(prefix))
	}
	return prefix, nil
}

// parseTLS says whether the URL asks for TLS (its scheme, tls=, or any TLS
// parameter), and returns the TLS parameters' config, nil when none.
func parseTLS(u *url.URL, tlsScheme string, ownq, theirs url.Values, bad func(string, ...any) error) (bool, *tls.Config, error) {
	useTLS := u.Scheme == tlsScheme
	if v := ownq.Get("tls"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return false, nil, bad("tls=%s: want true or false", errtext.Quote(v))
		}
		if !b && useTLS {
			return false, nil, bad("tls=false contradicts the %s scheme", tlsScheme)
		}
		if !b && tlsconf.Given(ownq) {
			return false, nil, bad("tls=false contradicts the TLS parameters (%s)", strings.Join(tlsconf.Params, ", "))
		}
		useTLS = b
	}
	tc, err := tlsconf.Parse(ownq, fmt.Sprintf("%s URL %s", u.Scheme, errtext.Quote(redact.URL(u))))
	if err != nil || tc == nil {
		return useTLS, nil, err
	}
	if theirs.Has("skip_verify") && ownq.Has(tlsconf.InsecureSkipVerify) {
		return false, nil, bad("skip_verify (go-redis's) and %s say the same: give one", tlsconf.InsecureSkipVerify)
	}
	if theirs.Has("skip_verify") && ownq.Has(tlsconf.CA) {
		return false, nil, bad("skip_verify leaves %s unused: give one of them", tlsconf.CA)
	}
	return true, tc, nil
}

// parseHosts checks the URL's hosts, its addr= parameters and its
// database path, and returns the hosts as host:port ("" for go-redis's
// default, localhost:6379).
func parseHosts(u *url.URL, theirs url.Values, bad func(string, ...any) error) ([]string, error) {
	hosts := strings.Split(u.Host, ",")
	if len(hosts) > 1 && slices.Contains(hosts, "") {
		return nil, bad("empty host in %s", errtext.Quote(u.Host))
	}
	for i, h := range hosts {
		if h == "" {
			continue
		}
		var err error
		if hosts[i], err = hostPort(h); err != nil {
			return nil, bad("%v", err)
		}
	}
	for _, a := range theirs["addr"] {
		if _, err := hostPort(a); err != nil || !strings.Contains(a, ":") {
			return nil, bad("addr=%s: want host:port", errtext.Quote(a))
		}
	}
	if db := strings.Trim(u.Path, "/"); db != "" {
		if n, err := strconv.Atoi(db); err != nil || n < 0 {
			return nil, bad("path %s: want /DB, a database number", errtext.Quote(u.Path))
		}
	}
	return hosts, nil
}

// parseKind decides the client's kind: master_name makes a Sentinel
// client, extra hosts or cluster=true a Cluster one.
func parseKind(ownq, theirs url.Values, extra int, bad func(string, ...any) error) (Kind, error) {
	failover := theirs.Has("master_name")
	cluster := extra > 0 && !failover
	if v := ownq.Get("cluster"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return 0, bad("cluster=%s: want true or false", errtext.Quote(v))
		}
		switch {
		case b && failover:
			return 0, bad("cluster=true and master_name (Sentinel) exclude each other")
		case !b && cluster:
			return 0, bad("cluster=false with %d hosts (several hosts are a Cluster's, or Sentinels with master_name)", extra+1)
		}
		cluster = b
	}
	if !failover && (theirs.Has("username") || theirs.Has("password")) {
		return 0, bad("username= and password= are the primary's credentials on a Sentinel URL (with master_name); " +
			"a single server's or a Cluster's go in the user info: user:password@host")
	}
	switch {
	case failover:
		return Failover, nil
	case cluster:
		return Cluster, nil
	}
	return Single, nil
}

// goRedis makes c's go-redis options of its Kind from gu, the URL in
// go-redis's own form, with go-redis's parsers.
func (c *Config) goRedis(gu url.URL, theirs url.Values, bad func(string, ...any) error) error {
	var err error
	switch c.Kind {
	case Failover:
		c.Failover, err = redis.ParseFailoverURL(gu.String())
		if err == nil {
			o := c.Failover
			o.ContextTimeoutEnabled = true
			// go-redis takes the user info for the Sentinels' credentials
			// and username= and password= for the primary's (and its
			// replicas'). Without either, the primary's are the user
			// info's too, one password for all.
			if !theirs.Has("username") && !theirs.Has("password") {
				o.Username, o.Password = o.SentinelUsername, o.SentinelPassword
			}
			if o.TLSConfig != nil {
				// Sentinels and the primary are verified by their own host names.
				o.TLSConfig.ServerName = ""
			}
		}
	case Cluster:
		if db := strings.Trim(gu.Path, "/"); db != "" && db != "0" {
			return bad("a Redis Cluster has only database 0")
		}
		gu.Path, gu.RawPath = "", ""
		c.Cluster, err = redis.ParseClusterURL(gu.String())
		if err == nil {
			c.Cluster.ContextTimeoutEnabled = true
			if c.Cluster.TLSConfig != nil {
				// Each node is verified by its own host name, not the first's.
				c.Cluster.TLSConfig.ServerName = ""
			}
		}
	default:
		if theirs.Has("addr") {
			return bad("addr= adds hosts to a Cluster or Sentinel URL, not to a single server's")
		}
		c.Single, err = redis.ParseURL(gu.String())
		if err == nil {
			c.Single.ContextTimeoutEnabled = true
		}
	}
	if err != nil {
		return bad("%s", explain(err))
	}
	return nil
}

// tlsConfig is the *tls.Config go-redis made for a TLS URL, nil for a
// plain one.
func (c *Config) tlsConfig() *tls.Config {
	switch c.Kind {
	case Cluster:
		return c.Cluster.TLSConfig
	case Failover:
		return c.Failover.TLSConfig
	}
	return c.Single.TLSConfig
}

// overlay sets what the TLS parameters gave (tc, from tlsconf.Parse) on
// go-redis's config dst: the CA, the client certificate, the server name
// (otherwise go-redis's choice stays: the URL's host for one server, each
// node's own for a Cluster or Sentinels) and skip-verify.
func overlay(dst, tc *tls.Config) {
	if tc.RootCAs != nil {
		dst.RootCAs = tc.RootCAs
	}
	if len(tc.Certificates) > 0 {
		dst.Certificates = tc.Certificates
	}
	if tc.ServerName != "" {
		dst.ServerName = tc.ServerName
	}
	if tc.InsecureSkipVerify {
		dst.InsecureSkipVerify = true
	}
}

// hostPort checks a host[:port], adding the default port 6379 when none
// is given.
func hostPort(h string) (string, error) {
	host, port, err := net.SplitHostPort(h)
	if err != nil {
		if !strings.Contains(err.Error(), "missing port") {
			return "", fmt.Errorf("host %s: %s", errtext.Quote(h), errtext.Bound(err.Error()))
		}
		host, port = strings.Trim(h, "[]"), "6379"
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("host %s: bad port", errtext.Quote(h))
	}
	if host == "" {
		return net.JoinHostPort("localhost", port), nil
	}
	return net.JoinHostPort(host, port), nil
}

var unexpected = regexp.MustCompile(`^redis: unexpected option: (.*)$`)

// explain turns go-redis's parse errors into dlock's wording: an unknown
// parameter lists the known ones.
func explain(err error) string {
	if m := unexpected.FindStringSubmatch(err.Error()); m != nil {
		return fmt.Sprintf("unknown URL parameter %s (known: ttl, autorenew, %s, and go-redis's: %s)",
			errtext.Bound(m[1]), strings.Join(Params, ", "), strings.Join(redisParams, ", "))
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		// net/url quotes the URL whole; its reason is enough.
		err = ue.Err
	}
	var ne *strconv.NumError
	if errors.As(err, &ne) {
		return fmt.Sprintf("bad number %s", errtext.Quote(ne.Num))
	}
	return errtext.Bound(strings.TrimPrefix(err.Error(), "redis: "))
}

// redisParams are the parameters go-redis's URL parsers read (v9), for
// error messages.
var redisParams = []string{
	"addr", "client_name", "conn_max_idle_time", "conn_max_lifetime", "db", "dial_timeout",
	"master_name", "max_active_conns", "max_idle_conns", "max_redirects", "max_retries",
	"max_retry_backoff", "min_idle_conns", "min_retry_backoff", "password", "pool_fifo", "pool_size",
	"pool_timeout", "protocol", "read_only", "read_timeout", "replica_only", "route_by_latency",
	"route_randomly", "skip_verify", "username", "write_timeout",
}
