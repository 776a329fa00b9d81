package testserver

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver/containerrpc"
)

// The docker provider's PostgreSQL: one container per node, started by
// pgstart.sh (embedded), which makes the data directory on the first start
// (initdb, or pg_basebackup -R from the primary for the replica) and keeps
// it across docker start. The settings are the local provider's. psql runs
// in the node's container (docker exec), so the host needs none.

func (dockerProvider) Postgres(lt Lifetime, opts *PostgresOptions) (*Postgres, error) {
	e, err := getEngine()
	if err != nil {
		return nil, err
	}
	t, err := newTLS(lt, opts.TLS)
	if err != nil {
		return nil, err
	}
	password := randomHex(12)
	p := newPostgres(password, t)
	var nodes []*containerNode
	p.psql = func(ctx context.Context, i int, url, sql string) (string, error) {
		if t != nil {
			// The URL's TLS files are the host's: psql in the container
			// uses the Unix socket instead, which trusts its users.
			url = pgSocketURL(url, "/tmp")
		}
		return containerPsql(nodes[i], url, sql)
	}
	n := 1
	if opts.Replica {
		n = 2
	}
	for i := range n {
		primary := "-"
		if i > 0 {
			primary = p.Nodes[0].Addr()
		}
		err := startWithRetry(func() error {
			port, err := FreePort()
			if err != nil {
				return err
			}
			spec, err := postgresSpec(port, password, primary, opts.Settings, t)
			if err != nil {
				return err
			}
			node, err := e.launch(lt, spec)
			if err != nil {
				return err
			}
			nodes = append(nodes, node)
			p.Nodes = append(p.Nodes, NewServer(node))
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return p, nil
}

// pgContainerKey is where pgstart.sh copies the server's TLS key, as the
// postgres user's with mode 0600, which PostgreSQL requires of it.
const pgContainerKey = "/var/lib/postgresql/dlock-server-key.pem"

func postgresSpec(port int, password, primary string, extra []string, t *TLS) (containerSpec, error) {
	script := containerDir + "/pgstart.sh"
	pwfile := containerDir + "/pwfile"
	cmd := []string{script, pwfile, primary}
	var tlsFiles []containerFile
	if t != nil {
		files, paths, err := t.containerFiles()
		if err != nil {
			return containerSpec{}, err
		}
		hba := containerTLSDir + "/pg_hba.conf"
		tlsFiles = append(files, containerFile{path: hba, data: []byte(pgTLSHba(paths.clientAuth)), mode: 0o644})
		// pgstart.sh's third argument: the key to copy to pgContainerKey.
		cmd = append(cmd, paths.key)
		paths.key = pgContainerKey
		extra = append(pgTLSSettings(paths, hba), extra...)
	} else {
		cmd = append(cmd, "-")
	}
	for _, s := range pgSettings(port, "/tmp", extra) {
		cmd = append(cmd, "-c", s)
	}
	return containerSpec{
		server:     "postgres",
		port:       port,
		image:      ContainerImage(KindPostgres),
		entrypoint: []string{"sh"},
		cmd:        cmd,
		files: append([]containerFile{
			{path: script, data: pgStartScript, mode: 0o755},
			{path: pwfile, data: []byte(password + "\n"), mode: 0o644},
		}, tlsFiles...),
		ready:   pgStartup("postgres", "postgres", t.probeConfig()),
		timeout: 60 * time.Second,
	}, nil
}

// pgSocketURL is raw (a URL of the harness's) to the server's Unix socket
// in sockDir instead: same user, password, database and port, no TLS.
func pgSocketURL(raw, sockDir string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	s := &url.URL{Scheme: u.Scheme, User: u.User, Path: u.Path}
	s.RawQuery = url.Values{"host": {sockDir}, "port": {u.Port()}}.Encode()
	return s.String()
}

// containerPsql runs psql in n's container with sql as its input. The
// helper's exec returns standard output and error together, so psql's
// standard error (notices, errors) is kept aside and shown only when it
// fails.
func containerPsql(n *containerNode, url, sql string) (string, error) {
	// The image built from Debian packages has no coreutils: dash's
	// builtins only. $1 is the SQL, the rest psql's arguments.
	script := `sql=$1; shift; err=/tmp/psql-err.$$; ` +
		`printf '%s' "$sql" | psql "$@" 2>"$err"; rc=$?; ` +
		`if [ $rc -ne 0 ]; then while IFS= read -r l; do printf '%s\n' "$l"; done <"$err"; fi; ` +
		`: >"$err"; exit $rc`
	cmd := append([]string{"sh", "-c", script, "sh", sql}, psqlArgs(url)...)
	var r containerrpc.ExecReply
	err := n.e.h.call("Exec", containerrpc.ExecArgs{ID: n.cid, Cmd: cmd}, &r)
	if err == nil && r.ExitCode != 0 {
		err = fmt.Errorf("exit code %d: %s", r.ExitCode, strings.TrimSpace(r.Output))
	}
	if err != nil {
		return "", fmt.Errorf("testserver: psql in %s (container %.12s) on %s: %v", n.name, n.id(), redactURL(url), err)
	}
	return strings.TrimSuffix(r.Output, "\n"), nil
}
