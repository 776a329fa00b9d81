package redisx

import (
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
)

func parse(t *testing.T, raw string) (*Config, error) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	return Parse(u, "redisnxs")
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		url    string
		kind   Kind
		addrs  []string
		user   string
		pass   string
		db     int
		tls    bool
		prefix string
		check  func(*Config) bool
	}{
		{url: "redisnx://", kind: Single, addrs: []string{"localhost:6379"}},
		{url: "redisnx://h", kind: Single, addrs: []string{"h:6379"}},
		{url: "redisnx://u:p%40ss@h:7000/3", kind: Single, addrs: []string{"h:7000"}, user: "u", pass: "p@ss", db: 3},
		{url: "redisnx://[::1]:7000", kind: Single, addrs: []string{"[::1]:7000"}},
		{url: "redisnxs://h:6380", kind: Single, addrs: []string{"h:6380"}, tls: true},
		{url: "redisnx://h:6380?tls=true&prefix=app:locks:", kind: Single, addrs: []string{"h:6380"}, tls: true, prefix: "app:locks:"},
		{url: "redisnx://a:1,b:2,c:3", kind: Cluster, addrs: []string{"a:1", "b:2", "c:3"}},
		{url: "redisnx://a:1,b,c:3", kind: Cluster, addrs: []string{"a:1", "b:6379", "c:3"}},
		{url: "redisnx://:7000", kind: Single, addrs: []string{"localhost:7000"}},
		{url: "redisnx://a:1?addr=b:2&addr=c:3", kind: Cluster, addrs: []string{"a:1", "b:2", "c:3"}},
		{url: "redisnx://a:1?cluster=true", kind: Cluster, addrs: []string{"a:1"}},
		{url: "redisnx://:pw@s1:26379,s2:26379?master_name=prim", kind: Failover, addrs: []string{"s1:26379", "s2:26379"}, pass: "pw",
			check: func(c *Config) bool {
				return c.Failover.MasterName == "prim" && c.Failover.SentinelUsername == "" && c.Failover.SentinelPassword == "pw"
			}},
		// username= and password= are the primary's, the user info the Sentinels'.
		{url: "redisnx://su:spw@s1:26379?master_name=prim&username=pu&password=ppw", kind: Failover, addrs: []string{"s1:26379"}, user: "pu", pass: "ppw",
			check: func(c *Config) bool {
				return c.Failover.SentinelUsername == "su" && c.Failover.SentinelPassword == "spw"
			}},
		{url: "redisnx://s1:26379?master_name=prim&password=ppw", kind: Failover, addrs: []string{"s1:26379"}, pass: "ppw",
			check: func(c *Config) bool { return c.Failover.SentinelUsername == "" && c.Failover.SentinelPassword == "" }},
		{url: "redisnx://:spw@s1:26379?master_name=prim&username=pu", kind: Failover, addrs: []string{"s1:26379"}, user: "pu",
			check: func(c *Config) bool { return c.Failover.SentinelPassword == "spw" }},
		// go-redis's own parameters pass through.
		{url: "redisnx://h?pool_size=7&read_timeout=2s&dial_timeout=3&protocol=2&client_name=app", kind: Single, addrs: []string{"h:6379"},
			check: func(c *Config) bool {
				o := c.Single
				return o.PoolSize == 7 && o.ReadTimeout == 2*time.Second && o.DialTimeout == 3*time.Second && o.Protocol == 2 && o.ClientName == "app"
			}},
		{url: "redisnx://a:1,b:2?max_redirects=5&read_only=true", kind: Cluster, addrs: []string{"a:1", "b:2"},
			check: func(c *Config) bool { return c.Cluster.MaxRedirects == 5 && c.Cluster.ReadOnly }},
		// lock's parameters are read too.
		{url: "redisnx://h?ttl=5s&autorenew=false", kind: Single, addrs: []string{"h:6379"},
			check: func(c *Config) bool { return c.Options.TTL == 5*time.Second && c.Options.DisableAutoRenew }},
	} {
		c, err := parse(t, tc.url)
		if err != nil {
			t.Errorf("%s: %v", tc.url, err)
			continue
		}
		var (
			addrs     []string
			user, pwd string
			db        int
			tls, ctxT bool
		)
		switch c.Kind {
		case Single:
			o := c.Single
			addrs, user, pwd, db, tls, ctxT = []string{o.Addr}, o.Username, o.Password, o.DB, o.TLSConfig != nil, o.ContextTimeoutEnabled
		case Cluster:
			o := c.Cluster
			addrs, user, pwd, tls, ctxT = o.Addrs, o.Username, o.Password, o.TLSConfig != nil, o.ContextTimeoutEnabled
		case Failover:
			o := c.Failover
			addrs, user, pwd, db, tls, ctxT = o.SentinelAddrs, o.Username, o.Password, o.DB, o.TLSConfig != nil, o.ContextTimeoutEnabled
		}
		if c.Kind != tc.kind || !slices.Equal(addrs, tc.addrs) || user != tc.user || pwd != tc.pass || db != tc.db || tls != tc.tls || c.Prefix != tc.prefix || !ctxT {
			t.Errorf("%s: kind %v addrs %v user %q pass %q db %d tls %v prefix %q ContextTimeoutEnabled %v", tc.url, c.Kind, addrs, user, pwd, db, tls, c.Prefix, ctxT)
		}
		if tc.check != nil && !tc.check(c) {
			t.Errorf("%s: go-redis options not as the URL says: %+v %+v %+v", tc.url, c.Single, c.Cluster, c.Failover)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"redisnx://h?bogus=1", "unknown URL parameter bogus (known: ttl, autorenew, prefix, cluster, tls, tls_ca, tls_cert, tls_key, tls_server_name, tls_insecure_skip_verify, and go-redis's: addr, client_name"},
		{"redisnx://h?tls=false&tls_insecure_skip_verify=true", "tls=false contradicts the TLS parameters"},
		{"redisnx://h?tls_insecure_skip_verify=maybe", `tls_insecure_skip_verify="maybe": want true or false`},
		{"redisnx://h?tls_cert=/nonexistent/c.pem", "tls_cert without tls_key"},
		{"redisnx://h?tls_ca=/nonexistent/ca.pem", "tls_ca: open /nonexistent/ca.pem"},
		{"redisnxs://h?tls_insecure_skip_verify=true&skip_verify=true", "give one"},
		{"redisnxs://h?tls_ca=/nonexistent/ca.pem&skip_verify=true", "tls_ca: open"},
		{"redisnx://h?ttl=nope", "ttl"},
		{"redisnx://h?pool_size=x", "pool_size"},
		{"redisnx://h?pool_size=1&pool_size=2", "given 2 times"},
		{"redisnx://a:1,b:2?cluster=false", "cluster=false with 2 hosts"},
		{"redisnx://a:1?master_name=m&cluster=true", "exclude each other"},
		{"redisnx://a:1,b:2/3", "only database 0"},
		{"redisnx://h/x", "database"},
		{"redisnx://h?prefix=", "empty prefix"},
		{"redisnx://h?prefix=a{b}", "contains '{'"},
		{"redisnxs://h?tls=false", "contradicts"},
		{"redisnx://h?addr=b:2&cluster=false", "cluster=false"},
		{"redisnx://a:1,,b:2", "empty host"},
		{"redisnx://h#frag", "want redisnx://"},
		{"redisnx://h:6379/-1", "database number"},
		{"redisnx://h:99999", "bad port"},
		{"redisnx://h:0", "bad port"},
		{"redisnx://a:1,b:70000", "bad port"},
		{"redisnx://a:1?addr=b", "want host:port"},
		{"redisnx://h?password=pw", "username= and password= are the primary's credentials on a Sentinel URL"},
		{"redisnx://a:1,b:2?username=u", "a single server's or a Cluster's go in the user info"},
	} {
		_, err := parse(t, tc.url)
		if !errors.Is(err, lock.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v; want ErrInvalid saying %q", tc.url, err, tc.want)
		}
	}
}

// TestParseTLS: the TLS parameters turn TLS on for the plain scheme too
// and land on go-redis's config, which keeps its own server name unless
// tls_server_name is given.
func TestParseTLS(t *testing.T) {
	f, err := testserver.NewTLSFiles(t.TempDir(), testserver.TLSOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q := "tls_ca=" + url.QueryEscape(f.CAFile) + "&tls_cert=" + url.QueryEscape(f.CertFile) + "&tls_key=" + url.QueryEscape(f.KeyFile)
	for _, tc := range []struct {
		url        string
		serverName string
		skip       bool
	}{
		{"redisnx://h:1?" + q, "h", false},
		{"redisnxs://h:1?" + q, "h", false},
		{"redisnx://h:1?tls=true&" + q + "&tls_server_name=db.example", "db.example", false},
		{"redisnx://a:1,b:2?" + q, "", false},
		{"redisnx://a:1,b:2?" + q + "&tls_server_name=db.example", "db.example", false},
		{"redisnx://s1:1?master_name=m&" + q, "", false},
		{"redisnx://h:1?tls_insecure_skip_verify=true", "h", true},
		{"redisnxs://h:1?skip_verify=true", "h", true},
	} {
		c, err := parse(t, tc.url)
		if err != nil {
			t.Errorf("%s: %v", tc.url, err)
			continue
		}
		tls := c.tlsConfig()
		switch {
		case tls == nil:
			t.Errorf("%s: no TLS", tc.url)
		case tls.ServerName != tc.serverName || tls.InsecureSkipVerify != tc.skip:
			t.Errorf("%s: ServerName %q InsecureSkipVerify %v, want %q %v", tc.url, tls.ServerName, tls.InsecureSkipVerify, tc.serverName, tc.skip)
		case !tc.skip && (tls.RootCAs == nil || len(tls.Certificates) != 1):
			t.Errorf("%s: CA or client certificate not set: %+v", tc.url, tls)
		}
	}
}

func TestSlot(t *testing.T) {
	for name, want := range map[string]int{
		"123456789":            12739, // CRC16/XMODEM check value 0x31c3
		"{123456789}.x":        12739, // the hash tag alone
		"a{123456789}b{c}":     12739, // the first tag
		"foo{}{bar}":           Slot("foo{}{bar}"),
		"":                     0,
		LockKey("dlock:", "}"): Slot("\xff"), // the tag is "\xff", never empty
	} {
		if got := Slot(name); got != want {
			t.Errorf("Slot(%q) = %d, want %d", name, got, want)
		}
	}
	if Slot("foo{}{bar}") == Slot("bar") {
		t.Error("an empty hash tag was taken for a tag")
	}
}
