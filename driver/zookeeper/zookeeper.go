package zookeeper

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errtext"
	"github.com/dlock-go/dlock/lock"
	"github.com/go-zookeeper/zk"
)

// Scheme is the URL scheme this package registers with lock.Open.
const Scheme = "zookeeper"

func init() { lock.Register(Scheme, open) }

// Defaults used when Options or a field of it is left zero.
const (
	// DefaultRoot is the parent of every key's node.
	DefaultRoot = "/dlock"
	// DefaultSessionTimeout is the session timeout Dial asks for.
	DefaultSessionTimeout = 10 * time.Second
	// AssumedSessionTimeout is the session timeout New assumes when
	// Options.SessionTimeout is not set: the least a server running with
	// ZooKeeper's default tickTime (2 s) grants, 2 x tickTime. Assuming
	// less than the real timeout only renews more often; assuming more
	// would be unsafe, so set SessionTimeout if your servers' tickTime is
	// lower (or minSessionTimeout is set below 4 s).
	AssumedSessionTimeout = 4 * time.Second
)

// Options configure a Locker. A nil *Options means all defaults.
type Options struct {
	lock.Options

	// Root is the path under which key nodes live (DefaultRoot when
	// empty). Missing nodes on the way are created as container nodes.
	Root string

	// SessionTimeout is, for Dial, the session timeout to ask for
	// (DefaultSessionTimeout when zero); the driver then uses the one the
	// server granted. For New, it is the timeout conn's session has, that
	// is the one given to zk.Connect, or the server's maxSessionTimeout if
	// that is lower (go-zookeeper does not tell); AssumedSessionTimeout
	// when zero. It bounds how long a crashed holder keeps a key.
	SessionTimeout time.Duration

	// Username and Password, when set, are a ZooKeeper digest identity:
	// Dial authenticates the connection with it (with New, call
	// conn.AddAuth("digest", []byte(user+":"+password)) yourself), and
	// the nodes the driver creates get the ACL zk.DigestACL(zk.PermAll,
	// Username, Password) unless ACL is set. Since ZooKeeper checks the
	// right to delete a node on its parent, this keeps other identities
	// from deleting, or queueing on, the lock nodes of keys whose nodes
	// this identity created.
	Username, Password string

	// ACL is the ACL of the nodes the driver creates (key nodes, lock
	// nodes, missing parents). Default: zk.WorldACL(zk.PermAll), or the
	// digest ACL above.
	ACL []zk.ACL

	// Dialer connects Dial to one server (net.DialTimeout when nil); set
	// it for a proxy. With TLS, the TLS handshake runs over the
	// connections it makes.
	Dialer zk.Dialer

	// TLS, when set, makes Dial's connections TLS with this config
	// (a server's secureClientPort). The name verified, and sent as SNI,
	// is TLS.ServerName when set, else each server's host as given to
	// Dial: the servers are then not resolved up front (go-zookeeper's
	// DNSHostProvider would give the dial IP addresses) but when dialled.
	// The handshake is bounded by go-zookeeper's connection timeout. The
	// wait for the first session (Dial's, or a first call's: see the
	// package doc, Connecting) fails at once, with crypto/tls's error,
	// when every server's last attempt failed TLS for a reason another
	// attempt will not mend (a certificate that does not verify, a TLS
	// alert such as a refused client certificate, a server not speaking
	// TLS). New refuses it (its calls fail with lock.ErrInvalid): conn's
	// TLS is that of the dialer it was made with (zk.WithDialer).
	TLS *tls.Config
}

// New returns a Locker over conn, a go-zookeeper connection that stays
// the caller's: Close leaves it open. Give conn's session timeout as
// o.SessionTimeout; without it, New assumes AssumedSessionTimeout, which is
// safe on servers with ZooKeeper's default tickTime.
//
// The driver does not need conn's event channel: it learns of session
// events by watching conn.State and conn.SessionID while it holds or waits
// for leases, and from its own requests. It does not know when conn's
// session began either, so it has no proof that the leader heard from the
// session until a request of its own is 0.3 of the timeout old: a grant in
// the first 3 s (of a 10 s session) after New waits for that. Dial and
// lock.Open count the session's handshake, and do not wait.
func New(conn *zk.Conn, o *Options) *lock.Locker {
	d, lo := newDriver(conn, o, nil, nil)
	if d.optsErr == nil && d.timeout.get() <= 0 {
		d.timeout.set(AssumedSessionTimeout)
	}
	return lock.New(d, lo)
}

// Dial connects to servers (host:port addresses of one ensemble),
// authenticates when o.Username is set, and returns a Locker that owns the
// connection: its Close closes it, which ends the session. It waits for
// the first session as the first call of a Locker from lock.Open does
// (that one returns at once and connects in the background), and no
// longer than the first of: ctx's end; each server having failed a
// connection attempt (refused, unreachable, or timed out after
// go-zookeeper's connect timeout, 1s, or ctx's deadline if sooner); the
// session timeout asked for. The error then wraps the last attempt's
// (errors.Is(err, syscall.ECONNREFUSED), say), and ctx's error when ctx
// ended it. With TLS, it fails at once when every server's last attempt
// failed the handshake for a reason another attempt will not mend (see
// Options.TLS).
func Dial(ctx context.Context, servers []string, o *Options) (*lock.Locker, error) {
	d, lo, err := dial(ctx, servers, o)
	if err != nil {
		return nil, err
	}
	return lock.New(d, lo), nil
}

// dial is Dial's driver: connect, then wait at the gate.
func dial(ctx context.Context, servers []string, o *Options) (*zkDriver, *lock.Options, error) {
	d, lo, err := connect(ctx, servers, o)
	if err != nil {
		return nil, nil, err
	}
	err = d.start.await(ctx)
	d.start.unbind()
	if err != nil {
		// In the background: go-zookeeper's Close waits up to 1s for a
		// server to take its close request, which one that gives no
		// session never does, and Dial returns by ctx's end.
		go d.Close()
		return nil, nil, err
	}
	return d, lo, nil
}

// connect makes the driver over a go-zookeeper connection to servers,
// which connects in the background: the driver's calls wait for its first
// session (see starter). Until bound (if not nil) is unbound, each
// connection attempt is bounded by its deadline too. It returns an error
// for invalid input, and when a server's name does not resolve.
func connect(bound context.Context, servers []string, o *Options) (*zkDriver, *lock.Options, error) {
	if len(servers) == 0 {
		return nil, nil, fmt.Errorf("%w: zookeeper: no servers", lock.ErrInvalid)
	}
	if o == nil {
		o = &Options{}
	}
	want := o.SessionTimeout
	if want == 0 {
		want = DefaultSessionTimeout
	}
	if want < 0 {
		return nil, nil, fmt.Errorf("%w: zookeeper: Options.SessionTimeout %v is negative", lock.ErrInvalid, want)
	}
	if err := checkOptions(o); err != nil { // before any I/O
		return nil, nil, fmt.Errorf("%w: zookeeper: %v", lock.ErrInvalid, err)
	}
	st := newStarter(servers, want, o, bound)
	dialer := o.Dialer
	if dialer == nil {
		dialer = net.DialTimeout
	}
	dialer = st.boundDialer(dialer)
	var hosts zk.HostProvider = zk.NewDNSHostProvider() // go-zookeeper's default
	if o.TLS != nil {
		dialer = tlsDialer(dialer, o.TLS)
		hosts = &namedHosts{}
	}
	nt := newNegotiatedTimeout()
	conn, ended, err := zk.Connect(servers, want,
		zk.WithHostProvider(hosts),
		zk.WithDialer(nt.wrapDialer(st.sock.wrap(st.errs.wrap(dialer)))),
		zk.WithLogger(zkLogger{o.Logger}),
		zk.WithLogInfo(false),
		zk.WithEventCallback(st.event))
	if err != nil {
		// go-zookeeper's DNSHostProvider resolves the servers' names up
		// front (for 3s at most), and one did not resolve.
		return nil, nil, fmt.Errorf("zookeeper: resolving %s: %w", st.list, err)
	}
	st.conn, st.hosts, st.ended = conn, hosts.Len(), ended
	d, lo := newDriver(conn, o, nt, st) // its option checks passed above, before any I/O
	st.mon.Store(d.mon)
	d.calls.Add(1)
	go st.run(d)
	return d, lo, nil
}

// zkLogger sends go-zookeeper's messages to the Locker's logger, at debug
// level: they are about connections, which the driver handles.
type zkLogger struct{ l *slog.Logger }

func (z zkLogger) Printf(format string, args ...any) {
	if z.l != nil {
		z.l.Debug("zookeeper: " + fmt.Sprintf(format, args...))
	}
}

// zkDriver implements driver.Driver, driver.Capable, driver.Queuer,
// driver.BatchRefresher, driver.Inspector and driver.Aser.
type zkDriver struct {
	conn    *zk.Conn
	owned   bool // Close closes conn
	root    string
	acl     []zk.ACL // of key nodes and lock nodes
	rootACL []zk.ACL // of the root and its ancestors, when the driver creates them
	timeout *negotiatedTimeout
	optsErr error
	mon     *monitor
	start   *starter       // the gate to the first session; nil for New
	calls   sync.WaitGroup // requests under way (and the starter)

	plainCreate atomic.Bool  // create without the setData of the key node (see create)
	relisted    atomic.Int64 // listings sent with a create that missed it (see join)
}

var (
	_ driver.Driver         = (*zkDriver)(nil)
	_ driver.Queuer         = (*zkDriver)(nil)
	_ driver.BatchRefresher = (*zkDriver)(nil)
)

// newDriver makes the driver over conn. Dial passes the timeout its
// connections negotiate (and owns conn); New passes nil: the timeout is
// o.SessionTimeout.
// start is Dial's gate to the first session (nil for New); it is set
// before the monitor's goroutine starts, which reads it.
func newDriver(conn *zk.Conn, o *Options, negotiated *negotiatedTimeout, start *starter) (*zkDriver, *lock.Options) {
	if o == nil {
		o = &Options{}
	}
	d := &zkDriver{conn: conn, root: o.Root, acl: o.ACL, timeout: negotiated, owned: negotiated != nil, start: start}
	if conn == nil {
		d.optsErr = errors.New("nil *zk.Conn")
	}
	if d.timeout == nil && o.TLS != nil && d.optsErr == nil {
		// New: the connection is made; silently plain would be worse.
		d.optsErr = errors.New("Options.TLS is for Dial: New's connection has the TLS of the dialer it was made with (zk.WithDialer)")
	}
	if d.timeout == nil {
		d.timeout = newNegotiatedTimeout()
		if o.SessionTimeout > 0 {
			d.timeout.set(o.SessionTimeout)
		} else if o.SessionTimeout < 0 {
			d.optsErr = fmt.Errorf("Options.SessionTimeout %v is negative", o.SessionTimeout)
		}
	}
	if d.root == "" {
		d.root = DefaultRoot
	}
	if err := checkOptions(o); err != nil && d.optsErr == nil {
		d.optsErr = err
	}
	d.rootACL = d.acl
	if d.acl == nil {
		// The default digest ACL guards this identity's keys; the root
		// stays open, so other identities can keep their keys beside them.
		d.rootACL = zk.WorldACL(zk.PermAll)
		if o.Username != "" {
			d.acl = zk.DigestACL(zk.PermAll, o.Username, o.Password)
		} else {
			d.acl = zk.WorldACL(zk.PermAll)
		}
	}
	d.mon = newMonitor(d)
	d.mon.start()
	lo := o.Options
	return d, &lo
}

// checkOptions checks what Options can be checked without a connection.
func checkOptions(o *Options) error {
	root := o.Root
	if root == "" {
		root = DefaultRoot
	}
	if err := checkRoot(root); err != nil {
		return err
	}
	if (o.Username == "") != (o.Password == "") {
		return errors.New("Options.Username and Options.Password go together")
	}
	return nil
}

// checkRoot checks that root is an absolute ZooKeeper path.
func checkRoot(root string) error {
	if root == "/" {
		return nil
	}
	if !strings.HasPrefix(root, "/") || strings.HasSuffix(root, "/") {
		return fmt.Errorf("root %s: want an absolute path without a trailing slash, like /app/locks", errtext.Quote(root))
	}
	for _, part := range strings.Split(root[1:], "/") {
		if part == "" || part == "." || part == ".." || EscapeKey(part) != part {
			return fmt.Errorf("root %s: segment %s is not a valid ZooKeeper node name", errtext.Quote(root), errtext.Quote(part))
		}
	}
	if strings.HasPrefix(root+"/", "/zookeeper/") {
		return fmt.Errorf("root %s is inside ZooKeeper's reserved /zookeeper", errtext.Quote(root))
	}
	return nil
}

// sessionTimeout is the session's timeout: the liveness bound of a grant.
// Before the first session of a Locker from Dial or lock.Open tells it,
// it is the timeout asked for: no grant rests on it then, as calls wait
// for that session (see starter).
func (d *zkDriver) sessionTimeout() time.Duration {
	if t := d.timeout.get(); t > 0 || d.start == nil {
		return t
	}
	return d.start.asked
}

func (d *zkDriver) keyPath(key string) string { return keyPath(d.root, key) }

// Capabilities implements driver.Capable. Shared grants and permits are
// lock nodes of their own kinds in the key's queue (see judge), and a
// grant's note is its node's data (see create); a grant
// lives with its session, so it can be neither resumed nor re-entered
// from another one.
func (d *zkDriver) Capabilities() driver.Caps {
	return driver.Caps{Name: "zookeeper", Shared: driver.Yes, Permits: driver.Yes,
		Reentry: driver.No(noReentry), Resume: driver.No(noResume), Notes: driver.Yes}
}

func (d *zkDriver) Validate(l *driver.Lease) error {
	if d.optsErr != nil {
		return fmt.Errorf("%w: zookeeper: %v", driver.ErrInvalid, d.optsErr)
	}
	switch l.Mode {
	case driver.Exclusive, driver.Shared:
	case driver.Permit:
		if l.Limit < 1 || l.Limit > lock.MaxPermits {
			return fmt.Errorf("%w: zookeeper: semaphore limit %d out of range [1, %d]", driver.ErrInvalid, l.Limit, lock.MaxPermits)
		}
	default:
		return fmt.Errorf("%w: zookeeper: unknown mode %v", driver.ErrInvalid, l.Mode)
	}
	// Every valid key maps to a node name (EscapeKey); the TTL is any lock
	// accepts. Whatever the TTL, a grant is sure to last the session
	// timeout after the last moment the leader surely heard from the
	// session, and no more: that is the validity, at most this (see the
	// package doc, "Sessions and TTLs").
	l.Validity = d.sessionTimeout()
	return nil
}

func (d *zkDriver) As(target any) bool {
	switch p := target.(type) {
	case **zk.Conn:
		*p = d.conn
		return true
	}
	return false
}

func (d *zkDriver) Close() error {
	if d.owned {
		d.mon.close(false, nil)
		d.conn.Close() // ends the session: ZooKeeper deletes its nodes
		d.start.shutdown()
		d.calls.Wait()
		return nil
	}
	// The caller's connection, and its session, live on: give attempts
	// under way a moment to delete the nodes their callers gave up on,
	// then try once more to delete the orphans left.
	d.mon.close(true, func() {
		done := make(chan struct{})
		go func() { d.calls.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Second):
		}
	})
	return nil
}
