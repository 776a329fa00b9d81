package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/dlock-go/dlock/driver/postgres"
	"github.com/dlock-go/dlock/lock"
)

const schemaUsage = `Usage: dlock schema [URL]

Prints the SQL that creates dlock's tables and functions for the backend
named by URL or $DLOCK_URL, with the URL's schema name (schema=NAME)
applied, for a database administrator to run once as a role that may
create them. The application then sets create_schema=false in its URL.
It makes no connection. Only PostgreSQL (postgres://, postgresql://) has
a schema; for the other backends dlock schema says so and exits 1.
Exit status: 0 when the SQL was printed, 1 when the backend has no
schema, 2 on usage errors.
`

// schemaScripts are the schemes whose driver keeps a schema made by SQL,
// and how to get that SQL from a URL of theirs.
var schemaScripts = map[string]func(*url.URL) (string, error){
	"postgres":   postgresSchema,
	"postgresql": postgresSchema,
}

func postgresSchema(u *url.URL) (string, error) {
	return postgres.SchemaSQL(u.Query().Get("schema"))
}

// cmdSchema is dlock schema. It returns the exit status.
func cmdSchema(args []string) int {
	urls := append(args[:len(args):len(args)], os.Getenv("DLOCK_URL"))
	stdout, stderr := scrubbing(os.Stdout, urls...), scrubbing(os.Stderr, urls...)
	fs := newFlagSet("schema", schemaUsage)
	fs.Usage = func() { fmt.Fprint(fs.Output(), schemaUsage) } // no flags to list
	if err := parseFlags(fs, args); err != nil {
		return parseFailed("schema", err, stdout, stderr)
	}
	raw := os.Getenv("DLOCK_URL")
	switch rest := fs.Args(); {
	case len(rest) > 1:
		return parseFailed("schema", usageError("want one URL, got %d arguments", len(rest)), stdout, stderr)
	case len(rest) == 1:
		raw = rest[0]
	case raw == "":
		return parseFailed("schema", usageError("no backend: give a URL or set DLOCK_URL, e.g. postgres://localhost/app"), stdout, stderr)
	}
	code, msg := printSchema(os.Stdout, raw)
	if msg != "" {
		fmt.Fprintf(stderr, "dlock schema: %s\n", msg)
	}
	return code
}

// printSchema writes the schema SQL of raw's backend to w. It returns the
// exit status and, when there is nothing to print, why.
func printSchema(w io.Writer, raw string) (int, string) {
	if msg := notCompiledIn(raw); msg != "" {
		return exitUsage, fmt.Sprintf("backend URL %q: %s", backendNameRaw(raw), msg)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return exitUsage, fmt.Sprintf("backend URL %q: %v", backendNameRaw(raw), err)
	}
	script, ok := schemaScripts[strings.ToLower(u.Scheme)]
	if !ok && slices.Contains(lock.Schemes(), u.Scheme) {
		return exitConflict, fmt.Sprintf("%s keeps no schema: there is no SQL to run, dlock makes what it needs itself (only postgres:// has a schema)", u.Scheme)
	}
	// Open checks the URL as dlock run would (unknown parameters, a
	// scheme not compiled in); the postgres driver does not connect
	// before its first call.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	locker, err := lock.Open(ctx, raw)
	if err != nil {
		if errors.Is(err, lock.ErrInvalid) {
			return exitUsage, err.Error()
		}
		return exitBackend, fmt.Sprintf("opening %s: %v", backendName(raw), err)
	}
	locker.Close()
	if !ok { // not reached: Open refuses schemes no driver registered
		return exitUsage, fmt.Sprintf("no driver for %s", u.Scheme)
	}
	sql, err := script(u)
	if err != nil {
		return exitUsage, err.Error()
	}
	fmt.Fprint(w, sql)
	return exitOK, ""
}
