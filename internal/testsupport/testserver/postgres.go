package testserver

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// PostgresOptions configures a PostgreSQL server. nil means the zero value.
type PostgresOptions struct {
	// Replica adds a hot standby streaming from the primary (made with
	// pg_basebackup -R): Node(0) is the primary, Node(1) the standby,
	// which Promote turns into a primary. A test asking for it is skipped
	// on an external server (DLOCK_POSTGRES_URL).
	Replica bool
	// Settings are extra server settings, each "name=value" (postgres -c),
	// e.g. "idle_session_timeout=1s". Ignored for external servers.
	Settings []string
	// TLS, if set, makes the server accept TLS connections only (ssl=on,
	// pg_hba.conf with hostssl lines and hostnossl ... reject), with
	// certificates from a throwaway CA; Postgres.TLS has the client's
	// files, and URL and the harness's psql use them. With ClientAuth the
	// server also requires a client certificate signed by the CA
	// (clientcert=verify-ca, besides the password). Not with Replica; a
	// test asking for it is skipped on an external server.
	TLS *TLSOptions
}

// Postgres is a PostgreSQL server, or a primary and its streaming replica
// (PostgresOptions.Replica). Its hooks act on every node; Node(i) acts on
// one. Committed data survives Kill and Restart (crash recovery; the
// servers run with fsync off, which loses nothing unless the machine
// itself goes down).
type Postgres struct {
	Group
	// User and Password are the superuser's, Database the database URL
	// names ("postgres" on servers the harness starts).
	User, Password, Database string
	// TLS has the PEM files of a server started with PostgresOptions.TLS
	// (nil otherwise).
	TLS *TLS

	base    *url.URL // URL of node 0, without user and password
	psql    psqlRunner
	local   bool // started by the local provider (PgBouncer can run beside it)
	binDir  string
	runAs   *pgUser
	nodeURL func(i int) *url.URL
}

// psqlRunner runs psql on the node with index node (0: the primary)
// against url, with sql on its standard input, and returns its standard
// output.
type psqlRunner func(ctx context.Context, node int, url, sql string) (string, error)

// StartPostgres returns a PostgreSQL server for this test alone: the one
// DLOCK_POSTGRES_URL names (fault hooks unavailable, Settings not applied;
// skipped if the test asks for a Replica), else one started by a provider
// and stopped at the end of the test. It fails the test if none can be
// had, and skips it with -short.
func StartPostgres(tb testing.TB, opts *PostgresOptions) *Postgres {
	tb.Helper()
	skipShort(tb)
	if opts != nil && opts.Replica && envAddrs(KindPostgres) != nil {
		tb.Skipf("testserver: the test needs a streaming replica; %s names one server", EnvPostgresURL)
	}
	if opts != nil && opts.TLS != nil && envAddrs(KindPostgres) != nil {
		tb.Skipf("testserver: the test needs a TLS server; %s names one whose TLS the harness does not configure", EnvPostgresURL)
	}
	p, err := startPostgres(tb, opts)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// SharedPostgres returns the test binary's shared PostgreSQL server (one
// server, default options; see SharedRedis for the rules). Tests sharing
// it must use distinct tables, keys and role names.
func SharedPostgres(tb testing.TB) *Postgres {
	tb.Helper()
	skipShort(tb)
	v, err := sharedGet(tb, KindPostgres, func(lt Lifetime) (any, error) { return startPostgres(lt, nil) })
	if err != nil {
		tb.Fatal(err)
	}
	p := *v.(*Postgres)
	p.Group = p.Group.asShared()
	return &p
}

func startPostgres(lt Lifetime, opts *PostgresOptions) (*Postgres, error) {
	if opts == nil {
		opts = &PostgresOptions{}
	}
	if env := envAddrs(KindPostgres); env != nil {
		if opts.Replica {
			return nil, fmt.Errorf("testserver: PostgresOptions.Replica on the server from %s", EnvPostgresURL)
		}
		if opts.TLS != nil {
			return nil, fmt.Errorf("testserver: PostgresOptions.TLS on the server from %s", EnvPostgresURL)
		}
		return externalPostgres(env[0])
	}
	if opts.TLS != nil && opts.Replica {
		return nil, errors.New("testserver: PostgresOptions.TLS with Replica is not supported")
	}
	p, err := pickProvider(KindPostgres)
	if err != nil {
		return nil, err
	}
	return p.Postgres(lt, opts)
}

// externalPostgres is the server a URL from DLOCK_POSTGRES_URL names;
// psql runs on this machine.
func externalPostgres(raw string) (*Postgres, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || u.Host == "" {
		return nil, fmt.Errorf("testserver: %s=%q: want a URL postgres://user:password@host:port/dbname", EnvPostgresURL, raw)
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "5432")
	}
	p := &Postgres{
		Group:    Group{Nodes: []*Server{ExternalServer(addr, "URL from "+EnvPostgresURL)}},
		User:     u.User.Username(),
		Database: strings.TrimPrefix(u.Path, "/"),
	}
	p.Password, _ = u.User.Password()
	base := *u
	base.User = nil
	p.base = &base
	p.nodeURL = func(int) *url.URL { c := base; return &c }
	p.psql = hostPsql("")
	return p, nil
}

// newPostgres returns the Postgres of servers the harness started, whose
// node i listens on Nodes[i].Addr(), with the superuser postgres and
// password, and TLS files t (nil: a plain server).
func newPostgres(password string, t *TLS) *Postgres {
	p := &Postgres{User: "postgres", Password: password, Database: "postgres", TLS: t}
	p.nodeURL = func(i int) *url.URL {
		return &url.URL{Scheme: "postgres", Host: p.Nodes[i].Addr(), Path: "/" + p.Database, RawQuery: pgSSLParams(t)}
	}
	return p
}

// pgSSLParams are the libpq (and pgx) parameters of a client of a server
// with TLS files t: sslmode=disable for a plain server, else
// sslmode=verify-full with the CA, and the client certificate when the
// server requires one.
func pgSSLParams(t *TLS) string {
	if t == nil {
		return "sslmode=disable"
	}
	q := url.Values{"sslmode": {"verify-full"}, "sslrootcert": {t.CAFile}}
	if t.ClientAuth {
		q.Set("sslcert", t.CertFile)
		q.Set("sslkey", t.KeyFile)
	}
	return q.Encode()
}

// URL returns a connection string for the superuser on the primary
// (Node(0)), as pgx and libpq take it:
// postgres://postgres:password@127.0.0.1:port/postgres?sslmode=disable,
// or for a TLS server (PostgresOptions.TLS) with sslmode=verify-full,
// sslrootcert and, with ClientAuth, sslcert and sslkey (pgSSLParams).
func (p *Postgres) URL() string { return p.NodeURLFor(0, p.User, p.Password) }

// URLFor is URL with another role's user name and password.
func (p *Postgres) URLFor(user, password string) string { return p.NodeURLFor(0, user, password) }

// NodeURL is URL for node i (1: the replica).
func (p *Postgres) NodeURL(i int) string { return p.NodeURLFor(i, p.User, p.Password) }

// NodeURLFor is URLFor for node i.
func (p *Postgres) NodeURLFor(i int, user, password string) string {
	u := p.nodeURL(i)
	u.User = url.UserPassword(user, password)
	return u.String()
}

// Exec runs sql (one or more statements) on the primary as the superuser,
// with psql, and returns what it printed: each row's columns separated by
// "|", one row a line, without headers. It stops at the first error, which
// it returns with psql's message. It is not a fault hook: it works on
// shared and external servers too.
func (p *Postgres) Exec(sql string) (string, error) { return p.ExecNode(0, sql) }

// ExecNode is Exec on node i (a standby refuses writes until promoted).
func (p *Postgres) ExecNode(i int, sql string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return p.psql(ctx, i, p.NodeURL(i), sql)
}

// CreateUser creates a role that can log in with password and has no
// other right (not a superuser; it cannot create roles or databases, nor
// replicate; in PostgreSQL 15 it cannot create tables in schema public
// either), and returns URLFor(name, password). Grant it what the test
// needs with Exec. On a shared or external server the name must be unique
// to the test.
func (p *Postgres) CreateUser(name, password string) (string, error) {
	if name == "" {
		return "", errors.New("testserver: CreateUser: empty role name")
	}
	_, err := p.Exec(fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD %s NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION;",
		QuoteIdent(name), QuoteLiteral(password)))
	if err != nil {
		return "", err
	}
	return p.URLFor(name, password), nil
}

// Promote turns the replica (Node(1)) into a primary and returns once it
// accepts writes. The old primary is left as it is: kill it first for a
// failover, as a restarted old primary would be a second primary.
func (p *Postgres) Promote() error {
	if len(p.Nodes) < 2 {
		return errors.New("testserver: Promote: no replica (PostgresOptions.Replica)")
	}
	return p.Nodes[1].hook("promote", func(Node) error {
		out, err := p.ExecNode(1, "SELECT pg_promote(true, 30);")
		if err != nil {
			return err
		}
		if strings.TrimSpace(out) != "t" {
			return fmt.Errorf("testserver: pg_promote on %s returned %q", p.Nodes[1].Addr(), out)
		}
		return nil
	})
}

// QuoteIdent quotes s as an SQL identifier.
func QuoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// QuoteLiteral quotes s as an SQL string literal (standard_conforming_strings on).
func QuoteLiteral(s string) string { return `'` + strings.ReplaceAll(s, `'`, `''`) + `'` }

// hostPsql runs this machine's psql (in binDir if set, else found by
// findPgBin).
func hostPsql(binDir string) psqlRunner {
	return func(ctx context.Context, _ int, url, sql string) (string, error) {
		psql := filepath.Join(binDir, "psql")
		if binDir == "" {
			var err error
			if psql, err = findPgBin("psql"); err != nil {
				return "", err
			}
		}
		cmd := exec.CommandContext(ctx, psql, psqlArgs(url)...)
		cmd.Env = append(os.Environ(), "PGCONNECT_TIMEOUT=5")
		cmd.Stdin = strings.NewReader(sql)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		cmd.WaitDelay = time.Second
		if err := cmd.Run(); err != nil {
			return out.String(), fmt.Errorf("testserver: psql on %s: %v: %s", redactURL(url), err, strings.TrimSpace(errb.String()))
		}
		return strings.TrimSuffix(out.String(), "\n"), nil
	}
}

// psqlArgs: no psqlrc, quiet, unaligned rows without headers, stop at the
// first error, statements from standard input.
func psqlArgs(url string) []string {
	return []string{"-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", url, "-f", "-"}
}

func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// pgStartup is the readiness probe of PostgreSQL and PgBouncer, as
// pg_isready's: it sends a startup message for user and database and
// wants the server to ask for authentication. A server that is starting,
// recovering or shutting down answers with an error instead, which is
// returned. The connection is closed before authenticating, which the
// server takes silently (as when psql asks for a password). With tc it
// first asks for TLS (SSLRequest) and speaks TLS with tc, as a TLS-only
// server wants.
func pgStartup(user, database string, tc *tls.Config) func(ctx context.Context, addr string) error {
	return func(ctx context.Context, addr string) error {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		defer func() { c.Close() }()
		if dl, ok := ctx.Deadline(); ok {
			c.SetDeadline(dl)
		}
		if tc != nil {
			// SSLRequest: length 8, code 1234.5679.
			req := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, 8), 80877103)
			if _, err := c.Write(req); err != nil {
				return err
			}
			var b [1]byte
			if _, err := io.ReadFull(c, b[:]); err != nil {
				return err
			}
			if b[0] != 'S' {
				return fmt.Errorf("postgres startup: SSLRequest answered %q, want 'S'", b[0])
			}
			host, _, _ := net.SplitHostPort(addr)
			cfg := tc.Clone()
			cfg.ServerName = host
			tc := tls.Client(c, cfg)
			if err := tc.HandshakeContext(ctx); err != nil {
				return err
			}
			c = tc
		}
		var msg []byte
		msg = binary.BigEndian.AppendUint32(msg, 0) // length, set below
		msg = binary.BigEndian.AppendUint32(msg, 3<<16)
		for _, kv := range []string{"user", user, "database", database} {
			msg = append(append(msg, kv...), 0)
		}
		msg = append(msg, 0)
		binary.BigEndian.PutUint32(msg, uint32(len(msg)))
		if _, err := c.Write(msg); err != nil {
			return err
		}
		var hdr [5]byte
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return err
		}
		n := int(binary.BigEndian.Uint32(hdr[1:])) - 4
		if n < 0 || n > 1<<16 {
			return fmt.Errorf("postgres startup: reply %q of length %d", hdr[0], n)
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(c, body); err != nil {
			return err
		}
		switch hdr[0] {
		case 'R':
			return nil
		case 'E':
			return fmt.Errorf("postgres startup: %s", pgErrorText(body))
		}
		return fmt.Errorf("postgres startup: unexpected reply %q", hdr[0])
	}
}

// pgErrorText formats an ErrorResponse's fields: "FATAL 57P03: message".
func pgErrorText(body []byte) string {
	f := map[byte]string{}
	for len(body) > 1 {
		t := body[0]
		v, rest, ok := bytes.Cut(body[1:], []byte{0})
		if !ok {
			break
		}
		f[t] = string(v)
		body = rest
	}
	return fmt.Sprintf("%s %s: %s", f['S'], f['C'], f['M'])
}

// CreateDatabase creates the database name on the primary, with
// settings (each "name=value") that ALTER DATABASE gives every session
// that connects to it (default_transaction_isolation=serializable, say),
// drops it at the end of the test, and returns URL for it. On a shared
// or external server the name must be unique to the test.
func (p *Postgres) CreateDatabase(tb testing.TB, name string, settings ...string) string {
	tb.Helper()
	sql := fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE);\nCREATE DATABASE %s;\n", QuoteIdent(name), QuoteIdent(name))
	for _, s := range settings {
		k, v, ok := strings.Cut(s, "=")
		if !ok {
			tb.Fatalf("testserver: CreateDatabase: setting %q, want name=value", s)
		}
		sql += fmt.Sprintf("ALTER DATABASE %s SET %s = %s;\n", QuoteIdent(name), QuoteIdent(strings.TrimSpace(k)), QuoteLiteral(strings.TrimSpace(v)))
	}
	if _, err := p.Exec(sql); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if _, err := p.Exec(fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE);", QuoteIdent(name))); err != nil {
			tb.Logf("testserver: %v", err)
		}
	})
	return DatabaseURL(p.URL(), name)
}

// DatabaseURL is the connection string raw (a Postgres's or a
// PgBouncer's) with the database name instead of its own.
func DatabaseURL(raw, name string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	u.Path = "/" + name
	return u.String()
}
