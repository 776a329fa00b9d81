package lock

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errtext"
	"github.com/dlock-go/dlock/internal/redact"
)

// OpenFunc opens a driver for a URL of one scheme: it reads the URL (the
// parameters every scheme shares with URLOptions) and returns the driver,
// which owns the clients it made (its Close closes them), and the Options
// the URL gives. Open makes the Locker, with what OpenWith adds.
type OpenFunc func(ctx context.Context, u *url.URL) (driver.Driver, *Options, error)

var registry struct {
	sync.RWMutex
	m map[string]OpenFunc
}

// Register makes a URL scheme available to Open. Driver packages call it
// from init, so importing a driver (even as _) is enough. Register panics if
// the scheme is empty, open is nil, or the scheme is registered twice, as
// database/sql.Register does: these are programming errors.
func Register(scheme string, open OpenFunc) {
	if scheme == "" || open == nil {
		panic("lock: Register with an empty scheme or a nil OpenFunc")
	}
	registry.Lock()
	defer registry.Unlock()
	if registry.m == nil {
		registry.m = map[string]OpenFunc{}
	}
	if _, dup := registry.m[scheme]; dup {
		panic("lock: Register called twice for scheme " + scheme)
	}
	registry.m[scheme] = open
}

// Schemes returns the registered URL schemes, sorted.
func Schemes() []string {
	registry.RLock()
	defer registry.RUnlock()
	s := make([]string, 0, len(registry.m))
	for k := range registry.m {
		s = append(s, k)
	}
	slices.Sort(s)
	return s
}

// Open returns a Locker for a URL such as
//
//	redisnx://user:pass@host:6379/0?ttl=10s
//	memcached://h1:11211,h2:11211
//	zookeeper://h1:2181,h2:2181/app/locks
//	memory://
//
// The scheme picks the driver, which must be imported (for its init) by the
// program. Every scheme accepts the query parameters
//
//	ttl=DURATION      default lease time, e.g. 15s (Options.TTL; 0: DefaultTTL)
//	autorenew=BOOL    automatic renewal, default true (Options.DisableAutoRenew)
//
// and the parameters its driver documents, but zookeeper refuses ttl=: its
// grants last as long as the session, set by session_timeout=. Every network
// driver reads the same TLS parameters:
// tls_ca=FILE, tls_cert=FILE with tls_key=FILE, tls_server_name=NAME and
// tls_insecure_skip_verify=BOOL; any of them turns TLS on. Unknown parameters, malformed
// URLs and unknown schemes are errors wrapping ErrInvalid, except on
// postgres, which hands a parameter it does not know to the server as a
// run-time setting: a misspelt one fails at the first call. No error quotes
// a secret of the URL: the user info's password and the value of every
// parameter whose name says it is one (password=, sentinel_password=, ...)
// are shown as xxxxx. The Locker owns the clients it opened: Close closes
// them.
//
// Open makes no round trip to the backend, on any scheme, and returns at
// once whether or not the backend is up (ctx goes to the scheme's
// OpenFunc; dlock's drivers do no I/O with it). The memcached and
// ZooKeeper clients resolve the servers' names there: a name that does not
// resolve is an error. The clients connect when first used (go-zookeeper's
// at once, in the background) and reconnect on their own. While the
// backend is unreachable, a waiting call waits and a Try call fails with
// ErrUnavailable, as the package doc's Outages says: a Try call within a
// bound that needs no deadline on its context (the client's dial timeout
// and retries; on ZooKeeper before the first session, once every server
// has failed an attempt, 1s each at most, and after the session timeout
// asked for at the latest).
func Open(ctx context.Context, rawURL string) (*Locker, error) {
	return OpenWith(ctx, rawURL, nil)
}

// OpenWith is Open with Options for what a URL does not carry: the Logger,
// the MeterProvider (with MetricKeys), the Retry strategy and the
// ReleaseTimeout of o replace the Locker's when set. TTL and auto-renewal
// come from the URL (ttl=, autorenew=), so that configuration alone decides
// them; o's TTL and DisableAutoRenew are ignored.
func OpenWith(ctx context.Context, rawURL string, o *Options) (*Locker, error) {
	if ctx == nil {
		return nil, fmt.Errorf("%w: Open: %v", ErrInvalid, errNilContext)
	}
	if o != nil && o.ReleaseTimeout < 0 {
		return nil, fmt.Errorf("%w: Options.ReleaseTimeout %v is negative", ErrInvalid, o.ReleaseTimeout)
	}
	d, uo, err := open(ctx, rawURL)
	if err != nil {
		return nil, err
	}
	var merged Options
	if uo != nil {
		merged = *uo
	}
	if o != nil {
		if o.Logger != nil {
			merged.Logger = o.Logger
		}
		if o.MeterProvider != nil {
			merged.MeterProvider, merged.MetricKeys = o.MeterProvider, o.MetricKeys
		}
		if o.Retry != nil {
			merged.Retry = o.Retry
		}
		if o.ReleaseTimeout > 0 {
			merged.ReleaseTimeout = o.ReleaseTimeout
		}
	}
	return New(d, &merged), nil
}

func open(ctx context.Context, rawURL string) (driver.Driver, *Options, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: malformed URL %s: %s", ErrInvalid, errtext.Quote(redact.Raw(rawURL)), errtext.Bound(parseFailure(rawURL, err).Error()))
	}
	if u.Scheme == "" {
		return nil, nil, fmt.Errorf("%w: URL %s has no scheme (want one of %s)", ErrInvalid, errtext.Quote(redact.URL(u)), strings.Join(Schemes(), ", "))
	}
	registry.RLock()
	open := registry.m[u.Scheme]
	registry.RUnlock()
	if open == nil {
		return nil, nil, unknownScheme(u.Scheme)
	}
	d, o, err := open(ctx, u)
	if err != nil {
		return nil, nil, err
	}
	if d == nil {
		return nil, nil, fmt.Errorf("%w: the driver of scheme %q opened nothing", ErrInvalid, u.Scheme)
	}
	return d, o, nil
}

// driverPackages are dlock's driver packages, for the hint of an unknown
// scheme (names only: lock imports no driver).
var driverPackages = []string{"memory", "redisnx", "rediswatch", "memcached", "zookeeper", "postgres", "etcd"}

// ownModules are the driver packages that are Go modules of their own,
// which a program must require besides dlock's main module.
var ownModules = []string{"etcd"}

// unknownScheme is the error for a scheme no driver registered, with what
// to do: import the driver that registers it, or, for go-redis's redis://
// and rediss://, pick one of the two Redis drivers.
func unknownScheme(scheme string) error {
	if scheme == "redis" || scheme == "rediss" {
		tls := strings.TrimPrefix(scheme, "redis") // "s" over TLS
		return fmt.Errorf("%w: unknown URL scheme %q: dlock's Redis drivers are redisnx%s:// (Lua scripts) and rediswatch%s:// (no scripts, for an ACL user denied @scripting), with the rest of the URL as go-redis reads it; import _ %q or %q",
			ErrInvalid, scheme, tls, tls, "github.com/dlock-go/dlock/driver/redisnx", "github.com/dlock-go/dlock/driver/rediswatch")
	}
	return fmt.Errorf("%w: unknown URL scheme %s (registered: %s); is the driver package imported? %s",
		ErrInvalid, errtext.Quote(scheme), strings.Join(Schemes(), ", "), importHint(scheme))
}

// importHint names the import that registers scheme, or lists them all.
func importHint(scheme string) string {
	const base = "github.com/dlock-go/dlock/driver/"
	name := strings.TrimSuffix(scheme, "s") // TLS variants: redisnxs://
	if scheme == "postgresql" {
		name = "postgres"
	}
	for _, p := range driverPackages {
		if p == scheme || p == name {
			if slices.Contains(ownModules, p) {
				return fmt.Sprintf("import _ %q (a module of its own: go get %s)", base+p, base+p)
			}
			return fmt.Sprintf("import _ %q", base+p)
		}
	}
	return fmt.Sprintf("dlock's drivers: %s (under %s)", strings.Join(driverPackages, ", "), base)
}

// parseFailure is why net/url could not parse raw, without quoting a
// secret: net/url's error quotes the URL whole, and its reason may quote a
// piece of a password (an unescaped '#' or '/' in it makes the rest a
// "port"). When raw parses with its secrets hidden, a secret was what
// broke it, and the reason says so instead.
func parseFailure(raw string, err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	hidden := redact.Raw(raw)
	if hidden == raw {
		return err
	}
	if _, herr := url.Parse(hidden); herr != nil {
		if errors.As(herr, &ue) {
			herr = ue.Err
		}
		return herr
	}
	return errors.New("a password is malformed (percent-encode any '@', ':', '/', '?', '#' or '%' in it)")
}

// URLOptions reads the query parameters that every scheme accepts (see
// Open) into Options, and returns the driver's own parameters, named in
// driverParams, for the driver to read. Any other parameter, a repeated
// parameter, or a malformed value gives an error wrapping ErrInvalid. It is
// for driver packages' OpenFuncs.
func URLOptions(u *url.URL, driverParams ...string) (*Options, url.Values, error) {
	if u == nil {
		return nil, nil, fmt.Errorf("%w: nil URL", ErrInvalid)
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: URL query: %s", ErrInvalid, errtext.Bound(err.Error()))
	}
	o := &Options{}
	rest := url.Values{}
	for name, vals := range q {
		if len(vals) != 1 {
			return nil, nil, fmt.Errorf("%w: URL parameter %s given %d times", ErrInvalid, errtext.Quote(name), len(vals))
		}
		v := vals[0]
		switch {
		case name == "ttl":
			d, err := time.ParseDuration(v)
			if err != nil {
				return nil, nil, fmt.Errorf("%w: URL parameter ttl=%s: want a duration such as 15s", ErrInvalid, errtext.Quote(v))
			}
			if err := checkTTL(d); d != 0 && err != nil { // 0: the default, as in Options
				return nil, nil, fmt.Errorf("%w: URL parameter ttl: %v", ErrInvalid, err)
			}
			o.TTL = d
		case name == "autorenew":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return nil, nil, fmt.Errorf("%w: URL parameter autorenew=%s: want true or false", ErrInvalid, errtext.Quote(v))
			}
			o.DisableAutoRenew = !b
		case slices.Contains(driverParams, name):
			rest.Set(name, v)
		default:
			known := append([]string{"ttl", "autorenew"}, driverParams...)
			return nil, nil, fmt.Errorf("%w: unknown URL parameter %s for scheme %s (known: %s)", ErrInvalid, errtext.Quote(name), u.Scheme, strings.Join(known, ", "))
		}
	}
	return o, rest, nil
}
