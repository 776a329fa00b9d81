package testserver

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/testserver/containerrpc"
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
	password := randomHex(12)
	p := newPostgres(password)
	var nodes []*containerNode
	p.psql = func(ctx context.Context, i int, url, sql string) (string, error) {
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
			node, err := e.launch(lt, postgresSpec(port, password, primary, opts.Settings))
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

func postgresSpec(port int, password, primary string, extra []string) containerSpec {
	script := containerDir + "/pgstart.sh"
	pwfile := containerDir + "/pwfile"
	cmd := []string{script, pwfile, primary}
	for _, s := range pgSettings(port, "/tmp", extra) {
		cmd = append(cmd, "-c", s)
	}
	return containerSpec{
		server:     "postgres",
		port:       port,
		image:      ContainerImage(KindPostgres),
		entrypoint: []string{"sh"},
		cmd:        cmd,
		files: []containerFile{
			{path: script, data: pgStartScript, mode: 0o755},
			{path: pwfile, data: []byte(password + "\n"), mode: 0o644},
		},
		ready:   pgStartup("postgres", "postgres"),
		timeout: 60 * time.Second,
	}
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
