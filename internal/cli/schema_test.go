package cli

import (
	"strings"
	"testing"

	"github.com/dlock-go/dlock/driver/postgres"
)

// TestSchema: dlock schema prints the SQL of a postgres URL's schema,
// under the URL's schema name, without connecting (nothing listens at
// port 1); a backend without a schema and a bad schema name are
// refused on stderr with nothing on stdout.
func TestSchema(t *testing.T) {
	want, err := postgres.SchemaSQL("app_locks")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args     []string
		env      string
		code     int
		stdout   string // the whole of it
		inStderr string
	}{
		{[]string{"schema", "postgres://app:secret@127.0.0.1:1/app?schema=app_locks&create_schema=false"}, "", exitOK, want, ""},
		{[]string{"schema"}, "postgresql://127.0.0.1:1/app?schema=app_locks", exitOK, want, ""},
		{[]string{"schema", "redisnx://127.0.0.1:1"}, "", exitConflict, "", "redisnx keeps no schema"},
		{[]string{"schema", "zookeeper://127.0.0.1:1"}, "", exitConflict, "", "zookeeper keeps no schema"},
		{[]string{"schema", "postgres://127.0.0.1:1/app?schema=Bad-Name"}, "", exitUsage, "", `schema "Bad-Name"`},
		{[]string{"schema", "postgres://127.0.0.1:1/app?create_schema=maybe"}, "", exitUsage, "", "create_schema"},
		{[]string{"schema"}, "", exitUsage, "", "no backend"},
		{[]string{"schema", "a", "b"}, "", exitUsage, "", "want one URL"},
	} {
		cmd := dlockCmd(t, "", "", tc.args...)
		cmd.Env = append(cmd.Env, "DLOCK_URL="+tc.env)
		stdout := &lockedWriter{}
		cmd.Stdout = stdout
		r := finish(t, cmd, start(t, cmd))
		if r.code != tc.code || stdout.String() != tc.stdout || !strings.Contains(r.stderr, tc.inStderr) || (tc.inStderr == "") != (r.stderr == "") {
			t.Errorf("dlock %q with DLOCK_URL=%q: %v\nstdout: %.200q\nwant exit %d, stdout %.200q, stderr with %q", tc.args, tc.env, r, stdout, tc.code, tc.stdout, tc.inStderr)
		}
		if strings.Contains(r.stderr, "secret") {
			t.Errorf("dlock %q: the password is on stderr: %s", tc.args, r.stderr)
		}
	}
	if !strings.Contains(want, "CREATE SCHEMA IF NOT EXISTS app_locks;") || strings.Contains(want, "dlock.") {
		t.Errorf("SchemaSQL(%q) does not use the name", "app_locks")
	}
}
