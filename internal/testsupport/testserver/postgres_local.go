package testserver

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// EnvPostgresBinDir names the directory of PostgreSQL's server programs
// (initdb, postgres, pg_basebackup, psql) for the local provider; by
// default they are found on PATH, else in Debian's
// /usr/lib/postgresql/<version>/bin (the highest version).
const EnvPostgresBinDir = "DLOCK_POSTGRES_BINDIR"

// pgPrograms are the programs the local provider runs.
var pgPrograms = []string{"initdb", "postgres", "pg_basebackup", "psql"}

// postgresBinDir returns the directory holding every program of
// pgPrograms, or an error saying how to install them.
func postgresBinDir() (string, error) {
	var dirs []string
	if d := os.Getenv(EnvPostgresBinDir); d != "" {
		dirs = append(dirs, d)
	} else {
		if p, err := exec.LookPath("postgres"); err == nil {
			dirs = append(dirs, filepath.Dir(p))
		}
		debian, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
		sort.Slice(debian, func(i, j int) bool { return pgVersion(debian[i]) > pgVersion(debian[j]) })
		dirs = append(dirs, debian...)
	}
next:
	for _, d := range dirs {
		for _, prog := range pgPrograms {
			if !isFile(filepath.Join(d, prog)) {
				continue next
			}
		}
		return d, nil
	}
	if d := os.Getenv(EnvPostgresBinDir); d != "" {
		return "", fmt.Errorf("%s=%s lacks one of %s", EnvPostgresBinDir, d, strings.Join(pgPrograms, ", "))
	}
	return "", errors.New("PostgreSQL's server programs (initdb, postgres) not found on PATH or in /usr/lib/postgresql/*/bin: apt-get install postgresql")
}

// pgVersion is the version in /usr/lib/postgresql/<version>/bin.
func pgVersion(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// findPgBin finds one of PostgreSQL's client programs: in the server's
// directory, else on PATH.
func findPgBin(name string) (string, error) {
	if d, err := postgresBinDir(); err == nil {
		return filepath.Join(d, name), nil
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s not found: apt-get install postgresql-client", name)
	}
	return p, nil
}

// pgUser is the user PostgreSQL's programs run as: initdb, postgres and
// pgbouncer refuse to run as root, so a test binary running as root runs
// them as the postgres user (which Debian's postgresql package creates),
// and owns their directories to it. nil: the test binary's own user.
type pgUser struct {
	name     string
	uid, gid uint32
}

func (u *pgUser) cred() *syscall.Credential {
	if u == nil {
		return nil
	}
	return &syscall.Credential{Uid: u.uid, Gid: u.gid}
}

// chown gives path to u (nothing to do for the test binary's own user).
func (u *pgUser) chown(path string) error {
	if u == nil {
		return nil
	}
	if err := os.Lchown(path, int(u.uid), int(u.gid)); err != nil {
		return fmt.Errorf("testserver: %w", err)
	}
	return nil
}

// mkdir makes dir (mode 0700) owned by u.
func (u *pgUser) mkdir(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("testserver: %w", err)
	}
	return dir, u.chown(dir)
}

var pgRunAs = sync.OnceValues(func() (*pgUser, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL refuses to run as root and there is no postgres user to run it as (%v): apt-get install postgresql creates it", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("user postgres: uid %q, gid %q", u.Uid, u.Gid)
	}
	return &pgUser{name: u.Username, uid: uint32(uid), gid: uint32(gid)}, nil
})

// reachable checks that u can enter dir: every directory above it must
// let others (or u's group, or u) search it.
func (u *pgUser) reachable(dir string) error {
	if u == nil {
		return nil
	}
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("testserver: %w", err)
		}
		sys, _ := st.Sys().(*syscall.Stat_t)
		m := st.Mode().Perm()
		ok := m&0o001 != 0 || (sys != nil && ((sys.Uid == u.uid && m&0o100 != 0) || (sys.Gid == u.gid && m&0o010 != 0)))
		if !ok {
			return fmt.Errorf("testserver: PostgreSQL runs as user %s, which cannot enter %s (mode %v): set TMPDIR to a directory it can reach, e.g. /tmp", u.name, d, m)
		}
		if filepath.Dir(d) == d {
			return nil
		}
	}
}

// run runs a PostgreSQL program (initdb, pg_basebackup) as u, in dir, and
// returns its error with its output.
func (u *pgUser) run(ctx context.Context, dir string, env []string, argv ...string) error {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: u.cred()}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("testserver: %s: %v\n%s", strings.Join(argv, " "), err, bytes.TrimSpace(out.Bytes()))
	}
	return nil
}

// The local provider runs initdb once per test binary, into a template
// data directory under the binary's base directory, and gives each
// server a copy: initdb takes over a second, a copy a fraction of that.
// The superuser's password is the template's, random per test binary.
var pgTemplate struct {
	mu       sync.Mutex
	made     bool
	dir      string
	password string
	err      error
}

func postgresTemplate(binDir string, u *pgUser) (dir, password string, err error) {
	pgTemplate.mu.Lock()
	defer pgTemplate.mu.Unlock()
	if !pgTemplate.made {
		pgTemplate.dir, pgTemplate.password, pgTemplate.err = makePostgresTemplate(binDir, u)
		pgTemplate.made = true
	}
	return pgTemplate.dir, pgTemplate.password, pgTemplate.err
}

// removePostgresTemplate removes the template, if any; the next server
// makes another.
func removePostgresTemplate() {
	pgTemplate.mu.Lock()
	defer pgTemplate.mu.Unlock()
	if pgTemplate.made && pgTemplate.err == nil {
		os.RemoveAll(filepath.Dir(pgTemplate.dir))
	}
	pgTemplate.made = false
}

func makePostgresTemplate(binDir string, u *pgUser) (string, string, error) {
	b, err := baseDir()
	if err != nil {
		return "", "", fmt.Errorf("testserver: %w", err)
	}
	root, err := u.mkdir(filepath.Join(b, "postgres-template"))
	if err != nil {
		return "", "", err
	}
	if err := u.reachable(root); err != nil {
		return "", "", err
	}
	password := randomHex(12)
	pwfile := filepath.Join(root, "pwfile")
	if err := os.WriteFile(pwfile, []byte(password+"\n"), 0o600); err != nil {
		return "", "", fmt.Errorf("testserver: %w", err)
	}
	if err := u.chown(pwfile); err != nil {
		return "", "", err
	}
	defer os.Remove(pwfile)
	data := filepath.Join(root, "data")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Unix sockets trust their user (the harness's psql uses TCP and the
	// password like the tests); TCP wants SCRAM passwords, replication
	// included (initdb's pg_hba.conf has those lines for 127.0.0.1).
	err = u.run(ctx, root, []string{"LC_ALL=C"}, filepath.Join(binDir, "initdb"), "-D", data,
		"-U", "postgres", "--pwfile", pwfile, "--auth-local=trust", "--auth-host=scram-sha-256",
		"-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions")
	if err != nil {
		return "", "", err
	}
	return data, password, nil
}

// copyDataDir copies the template data directory src to dst, owned by u.
func copyDataDir(src, dst string, u *pgUser) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		to := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			if err := os.Mkdir(to, info.Mode().Perm()); err != nil {
				return err
			}
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, to); err != nil {
				return err
			}
		case d.Type().IsRegular():
			if err := copyFile(path, to, info.Mode().Perm()); err != nil {
				return err
			}
		default:
			return nil
		}
		return u.chown(to)
	})
}

func copyFile(src, dst string, mode fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// pgSettings are the settings of every server the harness starts, local or
// in a container: listening on 127.0.0.1 only, its Unix socket in sockDir,
// and tuned for tests (no fsync: a killed server keeps what it wrote, as
// the page cache survives it; only a machine crash would lose data).
func pgSettings(port int, sockDir string, extra []string) []string {
	s := []string{
		"listen_addresses=127.0.0.1",
		"port=" + strconv.Itoa(port),
		"unix_socket_directories=" + sockDir,
		"max_connections=200",
		"shared_buffers=32MB",
		"fsync=off",
		"full_page_writes=off",
		"jit=off", // the image built from Debian packages leaves LLVM out
		"wal_keep_size=128MB",
		"log_line_prefix=%m [%p] ",
	}
	return append(s, extra...)
}

// postgresArgv is the command line of a server with data directory data.
func postgresArgv(postgres, data string, settings []string) []string {
	argv := []string{postgres, "-D", data}
	for _, s := range settings {
		argv = append(argv, "-c", s)
	}
	return argv
}

func localPostgres(lt Lifetime, opts *PostgresOptions) (*Postgres, error) {
	binDir, err := postgresBinDir()
	if err != nil {
		return nil, err
	}
	u, err := pgRunAs()
	if err != nil {
		return nil, err
	}
	tmpl, password, err := postgresTemplate(binDir, u)
	if err != nil {
		return nil, err
	}
	root, err := newWorkDir(lt, "postgres")
	if err != nil {
		return nil, err
	}
	if err := u.chown(root); err != nil {
		return nil, err
	}
	t, err := newTLS(lt, opts.TLS)
	if err != nil {
		return nil, err
	}
	p := newPostgres(password, t)
	p.psql = hostPsql(binDir)
	p.local, p.binDir, p.runAs = true, binDir, u
	n := 1
	if opts.Replica {
		n = 2
	}
	for i := range n {
		dir, err := u.mkdir(filepath.Join(root, "node"+strconv.Itoa(i)))
		if err != nil {
			return nil, err
		}
		data := filepath.Join(dir, "data")
		if i == 0 {
			err = copyDataDir(tmpl, data, u)
		} else {
			err = pgBaseBackup(binDir, u, dir, data, p.Nodes[0].Addr(), password)
		}
		if err != nil {
			return nil, err
		}
		settings := opts.Settings
		if t != nil {
			tlsSettings, err := pgLocalTLS(t, u, dir)
			if err != nil {
				return nil, err
			}
			settings = append(tlsSettings, settings...)
		}
		err = startWithRetry(func() error {
			port, err := FreePort()
			if err != nil {
				return err
			}
			proc := newPostgresProcess(binDir, u, dir, data, port, settings, t.probeConfig())
			if err := launch(lt, proc); err != nil {
				return err
			}
			p.Nodes = append(p.Nodes, NewServer(proc))
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return p, nil
}

// pgBaseBackup makes data a copy of the primary at addr set up to stream
// from it as a hot standby (-R: standby.signal and primary_conninfo).
func pgBaseBackup(binDir string, u *pgUser, dir, data, addr, password string) error {
	host, port, _ := strings.Cut(addr, ":")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return u.run(ctx, dir, []string{"PGPASSWORD=" + password, "PGCONNECT_TIMEOUT=5"},
		filepath.Join(binDir, "pg_basebackup"), "-h", host, "-p", port, "-U", "postgres",
		"-D", data, "-R", "-X", "stream", "-c", "fast", "--no-sync")
}

// pgLocalTLS copies t's server files into dir, the node's directory,
// owned by u with the key's mode 0600 as PostgreSQL wants, writes the
// pg_hba.conf of a TLS-only server there and returns the settings that
// use them.
func pgLocalTLS(t *TLS, u *pgUser, dir string) ([]string, error) {
	hp := t.hostPaths()
	var files []containerFile
	for _, f := range []struct {
		src, name string
		mode      int64
	}{{hp.cert, "server.pem", 0o644}, {hp.key, "server-key.pem", 0o600}, {hp.ca, "ca.pem", 0o644}} {
		b, err := os.ReadFile(f.src)
		if err != nil {
			return nil, fmt.Errorf("testserver: %w", err)
		}
		files = append(files, containerFile{path: filepath.Join(dir, f.name), data: b, mode: f.mode})
	}
	files = append(files, containerFile{path: filepath.Join(dir, "pg_hba.conf"), data: []byte(pgTLSHba(hp.clientAuth)), mode: 0o600})
	for _, f := range files {
		if err := os.WriteFile(f.path, f.data, fs.FileMode(f.mode)); err != nil {
			return nil, fmt.Errorf("testserver: %w", err)
		}
		if err := u.chown(f.path); err != nil {
			return nil, err
		}
	}
	return pgTLSSettings(tlsPaths{
		ca: files[2].path, cert: files[0].path, key: files[1].path, clientAuth: hp.clientAuth,
	}, files[3].path), nil
}

// pgTLSSettings are the settings of a TLS-only server with the files p and
// the pg_hba.conf at hba (pgTLSHba).
func pgTLSSettings(p tlsPaths, hba string) []string {
	s := []string{"ssl=on", "ssl_cert_file=" + p.cert, "ssl_key_file=" + p.key, "hba_file=" + hba}
	if p.clientAuth {
		s = append(s, "ssl_ca_file="+p.ca)
	}
	return s
}

// pgTLSHba is the pg_hba.conf of a TLS-only server: the Unix socket
// trusts its users (as initdb's), TCP without TLS is rejected, and TCP
// over TLS wants the password (SCRAM) and, with clientAuth, a client
// certificate signed by the CA (verify-ca: its name need not be the
// role's).
func pgTLSHba(clientAuth bool) string {
	opt := ""
	if clientAuth {
		opt = " clientcert=verify-ca"
	}
	return "local all all trust\n" +
		"hostnossl all all all reject\n" +
		"hostnossl replication all all reject\n" +
		"hostssl all all all scram-sha-256" + opt + "\n" +
		"hostssl replication all all scram-sha-256" + opt + "\n"
}

func newPostgresProcess(binDir string, u *pgUser, dir, data string, port int, extra []string, tc *tls.Config) *process {
	addr := hostPort(port)
	if real, err := filepath.EvalSymlinks(data); err == nil {
		data = real // as /proc/<pid>/cwd shows it
	}
	return &process{
		name:    "postgres " + addr,
		addr:    addr,
		argv:    postgresArgv(filepath.Join(binDir, "postgres"), data, pgSettings(port, dir, extra)),
		dir:     data,
		logPath: filepath.Join(dir, "postgres.log"),
		ready:   func(ctx context.Context) error { return pgStartup("postgres", "postgres", tc)(ctx, addr) },
		timeout: 60 * time.Second,
		cred:    u.cred(),
		stopSig: syscall.SIGINT, // fast shutdown: clients are disconnected
		members: func() []int { return processesIn(data) },
	}
}
