package postgres

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/dlock-go/dlock/driver"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A step runs as one simple-protocol query, whatever the database's, the
// role's or the pool's defaults (one message, one round trip, one
// transaction):
//
//	BEGIN ISOLATION LEVEL READ COMMITTED READ WRITE;
//	SELECT set_config(...);   search_path pg_catalog, pg_temp,
//	                          statement_timeout, lock_timeout and
//	                          idle_in_transaction_session_timeout off,
//	                          synchronous_commit at least on
//	SELECT ... FROM f(...);   the step, its arguments as literals
//	COMMIT
//
// Read committed is what schema.sql's functions are written for: each
// statement sees what committed before it, so a step that waited for the
// key's row sees the steps it waited for (at repeatable read its snapshot
// is older than the wait). The functions refuse to run at any other
// level. The search path is pg_catalog's, so that the statements after
// the settings (the literals' casts) resolve to the built-in objects,
// and the settings name them (a search path that names pg_catalog after
// another schema puts that schema's objects first). The timeouts are off
// because the call's context bounds the step: a database's statement_timeout would fail every step queued on a
// busy key (PostgreSQL 13 and later time each statement of such a query
// on its own). A commit waits for its WAL flush (and a synchronous
// standby's), so a crash or a failover loses no grant the client was told
// of. Nothing is prepared, which a transaction pooler keeps within its
// transaction.
//
// The fast form (see fastStep) sends lock3 or unlock3 alone, as a named
// prepared statement in its implicit transaction, where the session's own
// settings are what the wrapper would make them (the server's defaults
// are); the function checks them and refuses otherwise (see runFast).
const (
	stepBegin    = "BEGIN ISOLATION LEVEL READ COMMITTED READ WRITE"
	stepSettings = "SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true)," +
		" pg_catalog.set_config('statement_timeout', '0', true), pg_catalog.set_config('lock_timeout', '0', true)," +
		" pg_catalog.set_config('idle_in_transaction_session_timeout', '0', true)," +
		" pg_catalog.set_config('synchronous_commit', CASE WHEN pg_catalog.current_setting('synchronous_commit')" +
		" OPERATOR(pg_catalog.=) 'off' OR pg_catalog.current_setting('synchronous_commit') OPERATOR(pg_catalog.=) 'local'" +
		" THEN 'on' ELSE pg_catalog.current_setting('synchronous_commit') END, true)"
	stepCommit = "COMMIT"
)

// run runs query with args ($1, $2, ...) as a step (see above) and
// returns its rows, each column as text (NULL as nil). A step that
// failed leaves the pooled connection idle: its aborted transaction is
// rolled back (or the pool drops a connection that cannot say). A
// failure that says the schema is gone makes the next call install it
// again.
func (d *pgDriver) run(ctx context.Context, query string, args ...any) ([][][]byte, error) {
	return d.runStep(ctx, nil, query, args)
}

// runStep is run, trying f's fast form first when f is not nil. The
// wrapped query is built (its literals bound) only when the step is sent
// wrapped.
func (d *pgDriver) runStep(ctx context.Context, f *fastStep, query string, args []any) ([][][]byte, error) {
	c, pc, err := d.acquireConn(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Release()
	if f != nil {
		if rows, done, err := d.tryFast(ctx, pc, f, args); done {
			return rows, err
		}
	}
	call, err := bind(query, args)
	if err != nil {
		return nil, err
	}
	res, err := d.runWrapped(ctx, pc, call, 1+strings.Count(query, "; ")) // query has no literals yet
	if err != nil {
		return nil, err
	}
	return res[len(res)-1].Rows, nil
}

// runCalls runs calls, n statements with their literals bound, as one
// step (see above), and returns the calls' results.
func (d *pgDriver) runCalls(ctx context.Context, calls string, n int) ([]*pgconn.Result, error) {
	c, pc, err := d.acquireConn(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Release()
	return d.runWrapped(ctx, pc, calls, n)
}

// acquireConn takes a connection from the pool for a step, refusing one
// whose client_encoding is not UTF8.
func (d *pgDriver) acquireConn(ctx context.Context) (*pgxpool.Conn, *pgconn.PgConn, error) {
	c, err := d.pool.Acquire(ctx)
	if err != nil {
		return nil, nil, err
	}
	pc := c.Conn().PgConn()
	if enc := pc.ParameterStatus("client_encoding"); enc != "UTF8" {
		c.Release()
		return nil, nil, fmt.Errorf("%w: postgres: the connection's client_encoding is %s; dlock's steps need UTF8 (their arguments are escaped as UTF-8 in the query's text)", driver.ErrInvalid, enc)
	}
	return c, pc, nil
}

// tryFast runs f's plain form, then f, on pc when the connection allows
// it. done is false when neither ran to an answer and the step is to be
// sent wrapped; otherwise rows and err are the step's.
func (d *pgDriver) tryFast(ctx context.Context, pc *pgconn.PgConn, f *fastStep, args []any) (rows [][][]byte, done bool, err error) {
	if f.plain != nil && d.fastOn(pc) {
		rows, done, err := d.runFast(ctx, pc, f.plain, args)
		if err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == errLockTimeout {
				done = false // the wait for the row timed out, nothing changed: the function runs
			}
		}
		if done && (err != nil || len(rows) > 0) {
			if err = d.failed(ctx, pc, err); err != nil {
				return nil, true, err
			}
			d.plainRuns.Add(1)
			return rows, true, nil
		}
	}
	if d.fastOn(pc) {
		rows, done, err := d.runFast(ctx, pc, f, args)
		if done {
			if err = d.failed(ctx, pc, err); err != nil {
				return nil, true, err
			}
			d.fastRuns.Add(1)
			return rows, true, nil
		}
	}
	return nil, false, nil
}

// runWrapped runs calls, n statements with their literals bound, on pc
// in the wrapper's transaction (see above).
func (d *pgDriver) runWrapped(ctx context.Context, pc *pgconn.PgConn, calls string, n int) ([]*pgconn.Result, error) {
	res, err := pc.Exec(ctx, stepBegin+"; "+stepSettings+"; "+calls+"; "+stepCommit).ReadAll()
	if err == nil {
		for _, r := range res {
			if r.Err != nil {
				err = r.Err
				break
			}
		}
	}
	if err != nil {
		return nil, d.failed(ctx, pc, err)
	}
	if len(res) != n+3 {
		return nil, fmt.Errorf("%w: %d results, want %d", errShape, len(res), n+3)
	}
	return res[2 : len(res)-1], nil
}

// failed returns err, after rolling back what it left of a transaction
// on pc and noting a schema that is gone.
func (d *pgDriver) failed(ctx context.Context, pc *pgconn.PgConn, err error) error {
	if err == nil {
		return nil
	}
	if pc.TxStatus() != 'I' && !pc.IsClosed() && ctx.Err() == nil {
		pc.Exec(ctx, "ROLLBACK").Close() // on failure the pool drops the connection
	}
	dropIfEnded(ctx, pc)
	d.forgetSchema(err)
	return err
}

// dropIfEnded closes pc's socket when ctx's end closed the connection.
// pgx (v5.11 and later) then drains the socket for up to 15 s before
// closing it, and the pool's slot stays taken until it does: behind a
// network that holds the server's replies, the clean-up of this very call
// (a Leave, a lost reply's release) or the next call on a small pool would
// wait for the drain. The cancel request pgx sends the server is not
// affected. A connection pgx closed is never handed out again, so no
// other call uses the socket.
func dropIfEnded(ctx context.Context, pc *pgconn.PgConn) {
	if pc.IsClosed() && ctx.Err() != nil {
		pc.Conn().Close()
	}
}

// forgetSchema makes the next call read (and install) the schema again
// when err says it is gone: the schema, a function or a table dropped
// (a restore, an operator), which a Locker that ran before would
// otherwise report until it closed.
func (d *pgDriver) forgetSchema(err error) {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && schemaMissing(pe.Code) {
		d.damaged.Store(true)
		d.installed.Store(false)
	}
}

// schemaMissing: invalid_schema_name, undefined_function, undefined_table,
// undefined_column (keys.n, which the plain steps read, on a schema an
// older client made again after this one read the version).
func schemaMissing(code string) bool {
	return code == "3F000" || code == "42883" || code == "42P01" || code == "42703"
}

// bind puts args in query's $1, $2, ... as SQL literals of their types.
func bind(query string, args []any) (string, error) {
	var b strings.Builder
	for i := 0; i < len(query); i++ {
		if query[i] != '$' || i+1 == len(query) || query[i+1] < '1' || query[i+1] > '9' {
			b.WriteByte(query[i])
			continue
		}
		n := int(query[i+1] - '0')
		i++
		if n > len(args) {
			return "", fmt.Errorf("postgres: a step with %d arguments refers to $%d", len(args), n)
		}
		lit, err := literal(args[n-1])
		if err != nil {
			return "", err
		}
		b.WriteString(lit)
	}
	return b.String(), nil
}

// literal is a as an SQL literal. Strings are escape strings (E'...'),
// read the same whatever standard_conforming_strings says.
func literal(a any) (string, error) {
	switch v := a.(type) {
	case string:
		return textLiteral(v) + "::text", nil
	case int64:
		return strconv.FormatInt(v, 10) + "::bigint", nil
	case bool:
		return strconv.FormatBool(v), nil
	case []string:
		if len(v) == 0 {
			return "'{}'::text[]", nil
		}
		lits := make([]string, len(v))
		for i, s := range v {
			lits[i] = textLiteral(s)
		}
		return "ARRAY[" + strings.Join(lits, ", ") + "]::text[]", nil
	}
	return "", fmt.Errorf("postgres: a step argument of type %s", typeName(a))
}

// typeName is %T of a, without a escaping to the heap (as it would
// through fmt): the steps' arguments, boxed in an ...any at each call,
// then stay on the caller's stack.
func typeName(a any) string {
	if a == nil {
		return "<nil>"
	}
	return reflect.TypeOf(a).String()
}

var escape = strings.NewReplacer(`\`, `\\`, `'`, `''`)

func textLiteral(s string) string { return "E'" + escape.Replace(s) + "'" }

// errShape: a step's reply is not what its function returns (a schema
// changed by hand).
var errShape = errors.New("postgres: a step's reply has another shape")

// row1 is the one row of a step that returns one.
func row1(rows [][][]byte, cols int) ([][]byte, error) {
	if len(rows) != 1 || len(rows[0]) != cols {
		return nil, fmt.Errorf("%w: %d rows, want one of %d columns", errShape, len(rows), cols)
	}
	return rows[0], nil
}

func textInt(b []byte) (int64, error) {
	if b == nil {
		return 0, nil
	}
	return strconv.ParseInt(string(b), 10, 64)
}

func textBool(b []byte) bool { return len(b) == 1 && b[0] == 't' }
