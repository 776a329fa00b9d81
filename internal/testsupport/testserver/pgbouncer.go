package testserver

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// PgBouncer is a PgBouncer in front of a Postgres's primary. Its hooks
// act on the PgBouncer process; the server behind it is the Postgres's.
type PgBouncer struct {
	*Server
	// Mode is the pool mode: "transaction" or "session".
	Mode string
	pg   *Postgres
}

// StartPgBouncer starts a PgBouncer for this test alone in front of pg's
// primary (Node(0)), in pool mode "transaction" (a server connection is
// lent for one transaction) or "session", on a free loopback port, and
// stops it at the end of the test. Every role of pg with a password logs
// in through it with that password (auth_type scram-sha-256; PgBouncer
// looks the role's secret up on the server as the superuser, auth_query),
// to every database of pg.
//
// In transaction mode, PgBouncer 1.18 (Debian 12) does not carry named
// prepared statements from one transaction to the next: pgx needs
// QueryExecModeExec or QueryExecModeSimpleProtocol there.
//
// Only the local provider runs PgBouncer: the test is skipped when pg is a
// container or a server from DLOCK_POSTGRES_URL, and fails when pgbouncer
// is not installed. It skips with -short.
func StartPgBouncer(tb testing.TB, pg *Postgres, mode string) *PgBouncer {
	tb.Helper()
	skipShort(tb)
	if mode != "transaction" && mode != "session" {
		tb.Fatalf("testserver: StartPgBouncer: pool mode %q, want \"transaction\" or \"session\"", mode)
	}
	if !pg.local {
		tb.Skipf("testserver: PgBouncer runs beside local servers only; %s is not one (a container, or the server %s names)", pg.Addr(), EnvPostgresURL)
	}
	if pg.TLS != nil {
		tb.Fatalf("testserver: StartPgBouncer: %s is a TLS server (PostgresOptions.TLS), which PgBouncer here does not speak to", pg.Addr())
	}
	b, err := localPgBouncer(tb, pg, mode)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// URL returns a connection string for pg's superuser through PgBouncer,
// to the same database as pg.URL.
func (b *PgBouncer) URL() string { return b.URLFor(b.pg.User, b.pg.Password) }

// URLFor is URL for another role of pg.
func (b *PgBouncer) URLFor(user, password string) string {
	u := &url.URL{Scheme: "postgres", User: url.UserPassword(user, password), Host: b.Addr(),
		Path: "/" + b.pg.Database, RawQuery: "sslmode=disable"}
	return u.String()
}

// findPgBouncer finds the pgbouncer program: on PATH, else in /usr/sbin
// (where Debian puts it, off an ordinary user's PATH).
func findPgBouncer() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	if isFile("/usr/sbin/pgbouncer") {
		return "/usr/sbin/pgbouncer", nil
	}
	return "", errors.New("pgbouncer not found on PATH or in /usr/sbin: apt-get install pgbouncer")
}

func localPgBouncer(lt Lifetime, pg *Postgres, mode string) (*PgBouncer, error) {
	bin, err := findPgBouncer()
	if err != nil {
		return nil, fmt.Errorf("testserver: %w", err)
	}
	u := pg.runAs
	dir, err := newWorkDir(lt, "pgbouncer")
	if err != nil {
		return nil, err
	}
	if err := u.chown(dir); err != nil {
		return nil, err
	}
	userlist := filepath.Join(dir, "userlist.txt")
	if err := os.WriteFile(userlist, []byte(fmt.Sprintf("%q %q\n", pg.User, pg.Password)), 0o600); err != nil {
		return nil, fmt.Errorf("testserver: %w", err)
	}
	if err := u.chown(userlist); err != nil {
		return nil, err
	}
	b := &PgBouncer{Mode: mode, pg: pg}
	err = startWithRetry(func() error {
		port, err := FreePort()
		if err != nil {
			return err
		}
		conf := filepath.Join(dir, "pgbouncer.ini")
		if err := os.WriteFile(conf, []byte(pgBouncerConf(pg, port, dir, mode, userlist)), 0o600); err != nil {
			return fmt.Errorf("testserver: %w", err)
		}
		if err := u.chown(conf); err != nil {
			return err
		}
		addr := hostPort(port)
		p := &process{
			name:    "pgbouncer " + addr,
			addr:    addr,
			argv:    []string{bin, conf},
			dir:     dir,
			logPath: filepath.Join(dir, "pgbouncer.log"),
			ready: func(ctx context.Context) error {
				return pgStartup(pg.User, pg.Database, nil)(ctx, addr)
			},
			timeout: 15 * time.Second,
			cred:    u.cred(),
		}
		if err := launch(lt, p); err != nil {
			return err
		}
		b.Server = NewServer(p)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return b, nil
}

// pgBouncerConf is pgbouncer.ini: every database of pg's primary, clients
// authenticated with SCRAM against the role's secret on the server
// (auth_query as the superuser, whose password is in userlist), logging to
// standard error.
func pgBouncerConf(pg *Postgres, port int, dir, mode, userlist string) string {
	host, pgPort, _ := strings.Cut(pg.Nodes[0].Addr(), ":")
	var b strings.Builder
	fmt.Fprintf(&b, "[databases]\n* = host=%s port=%s\n\n[pgbouncer]\n", host, pgPort)
	fmt.Fprintf(&b, "listen_addr = 127.0.0.1\nlisten_port = %d\nunix_socket_dir = %s\n", port, dir)
	fmt.Fprintf(&b, "auth_type = scram-sha-256\nauth_file = %s\nauth_user = %s\n", userlist, pg.User)
	fmt.Fprintf(&b, "pool_mode = %s\nmax_client_conn = 1000\ndefault_pool_size = 50\n", mode)
	b.WriteString("admin_users = " + pg.User + "\n")
	b.WriteString("ignore_startup_parameters = extra_float_digits\n")
	b.WriteString("server_login_retry = 1\nserver_connect_timeout = 5\n")
	b.WriteString("logfile =\npidfile =\n")
	return b.String()
}
