package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// A step runs as one pipelined exchange, whatever the database's, the
// role's or the pool's defaults (one round trip, one transaction):
//
//	BEGIN ISOLATION LEVEL READ COMMITTED READ WRITE
//	SELECT set_config(...)   statement_timeout, lock_timeout and
//	                         idle_in_transaction_session_timeout off,
//	                         synchronous_commit at least on
//	SELECT ... FROM f(...)   the step
//	COMMIT
//
// Read committed is what schema.sql's functions are written for: each
// statement sees what committed before it, so a step that waited for the
// key's row sees the steps it waited for (at repeatable read its snapshot
// is older than the wait). The functions refuse to run at any other
// level. The timeouts are off because the call's context bounds the
// step: a database's statement_timeout would fail every step queued on a
// busy key. A commit waits for its WAL flush (and a synchronous standby's),
// so a crash or a failover loses no grant the client was told of. The statements are unnamed (prepared and run in the one
// exchange), which a transaction pooler keeps within its transaction.
const (
	stepBegin    = "BEGIN ISOLATION LEVEL READ COMMITTED READ WRITE"
	stepSettings = "SELECT set_config('statement_timeout', '0', true), set_config('lock_timeout', '0', true)," +
		" set_config('idle_in_transaction_session_timeout', '0', true)," +
		" set_config('synchronous_commit', CASE WHEN current_setting('synchronous_commit') IN ('off', 'local')" +
		" THEN 'on' ELSE current_setting('synchronous_commit') END, true)"
	stepCommit = "COMMIT"
)

// run runs query with args as a step (see above) and returns its rows,
// each column as text (NULL as nil). A step that failed leaves the pooled
// connection idle: its aborted transaction is rolled back (or the pool
// drops a connection that cannot say). A failure that says the schema is
// gone makes the next call install it again.
func (d *pgDriver) run(ctx context.Context, query string, args ...any) ([][][]byte, error) {
	params, oids, err := encode(args)
	if err != nil {
		return nil, err
	}
	c, err := d.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Release()
	pc := c.Conn().PgConn()
	b := &pgconn.Batch{}
	b.ExecParams(stepBegin, nil, nil, nil, nil)
	b.ExecParams(stepSettings, nil, nil, nil, nil)
	b.ExecParams(query, params, oids, nil, nil)
	b.ExecParams(stepCommit, nil, nil, nil, nil)
	res, err := pc.ExecBatch(ctx, b).ReadAll()
	if err == nil {
		for _, r := range res {
			if r.Err != nil {
				err = r.Err
				break
			}
		}
	}
	if err != nil {
		if pc.TxStatus() != 'I' && !pc.IsClosed() && ctx.Err() == nil {
			pc.Exec(ctx, "ROLLBACK").Close() // on failure the pool drops the connection
		}
		d.forgetSchema(err)
		return nil, err
	}
	if len(res) != 4 {
		return nil, fmt.Errorf("%w: %d results, want 4", errShape, len(res))
	}
	return res[2].Rows, nil
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

// schemaMissing: invalid_schema_name, undefined_function, undefined_table.
func schemaMissing(code string) bool {
	return code == "3F000" || code == "42883" || code == "42P01"
}

// encode gives a step's arguments in text format, with their types.
func encode(args []any) ([][]byte, []uint32, error) {
	params, oids := make([][]byte, len(args)), make([]uint32, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case string:
			params[i], oids[i] = []byte(v), pgtype.TextOID
		case int64:
			params[i], oids[i] = strconv.AppendInt(nil, v, 10), pgtype.Int8OID
		case bool:
			params[i], oids[i] = []byte(strconv.FormatBool(v)), pgtype.BoolOID
		case []string:
			params[i], oids[i] = textArray(v), pgtype.TextArrayOID
		default:
			return nil, nil, fmt.Errorf("postgres: a step argument of type %T", a)
		}
	}
	return params, oids, nil
}

// textArray is ss as a text[] literal: every element quoted, with " and \
// escaped.
func textArray(ss []string) []byte {
	var b strings.Builder
	b.WriteByte('{')
	for i, s := range ss {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		for _, r := range s {
			if r == '"' || r == '\\' {
				b.WriteByte('\\')
			}
			b.WriteRune(r)
		}
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return []byte(b.String())
}

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
