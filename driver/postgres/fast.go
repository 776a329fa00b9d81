package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5/pgconn"
)

// The fast form of a step: lock3, unlock3 or check_turn3 sent alone, as
// a named prepared statement (Bind, Execute, Sync: one round trip) that
// runs in its own implicit transaction, without the wrapper's BEGIN, set_config
// and COMMIT (see run). The wrapper exists for sessions whose settings
// are not the server's defaults; the function checks the session itself
// (step_settings in schema.sql) and refuses, changing nothing, with
// SQLSTATE DL001 when its isolation level, synchronous_commit,
// statement_timeout or read-only mode is not what the wrapper would set;
// lock_timeout is set by its own SET clause. The check runs in the step's
// own transaction, on the server connection that runs the step, so a
// pooler that lends a connection whose session someone else has changed
// is caught as well as a role's defaults.
//
// On DL001 the driver sends the step again, wrapped, on the same
// connection, and sends every later step of that connection wrapped; so
// it does on 0A000, which Bind returns, before anything runs, once the
// statement's plan would return other types than its Prepare described
// (a table's column or a function's result changed by hand or an
// install): the statement fails so on the connection until it is gone. When
// a prepared statement is missing or already there under its name
// (26000, 42P05: a transaction pooler lent another server connection,
// or the session was reset), the Locker sends every later step wrapped.
// With Options.TransactionPooling nothing is prepared: every step is
// wrapped.
//
// Since schema version 9 an exclusive Lock and its Unlock first send a
// plain UPDATE of the key's row (plain, below), prepared the same way,
// and the function only when it changes nothing.
type fastStep struct {
	// name is the prepared statement's name on each connection. The
	// server keeps a name's first 63 bytes: each is distinct from the
	// others' there under any schema Options.Schema takes (50 bytes).
	name  string
	sql   string    // its text, $1, $2, ... the arguments picked by args
	args  []int     // the indexes, in the step's arguments, of its parameters
	oids  []uint32  // their types
	plain *fastStep // tried first: the step's row, or no row when the function is to run
}

// Parameter types of the fast steps.
const (
	oidBool = 16
	oidInt8 = 20
	oidText = 25
)

// errRefusedFast is step_settings' SQLSTATE.
const errRefusedFast = "DL001"

// SQLSTATEs of a plain step that changed nothing: read_only_sql_transaction
// (a session whose transactions are read-only: refused, as DL001) and
// lock_not_available (the session's lock_timeout ran out while the key's
// row was locked: the function, whose SET clause turns it off, runs).
const (
	errReadOnly    = "25006"
	errLockTimeout = "55P03"
)

// errResultChanged is feature_not_supported, which Bind of a prepared
// statement returns for "cached plan must not change result type".
const errResultChanged = "0A000"

// wrappedKey, in a connection's CustomData, marks a connection whose
// session refused a fast step: its steps are sent wrapped.
const wrappedKey = "dlock.wrapped"

// fastSteps are lock3 (acquire's arguments: key, owner, ttl, queue,
// entry life, channel), unlock3 (release's: key, owner, ttl) and
// check_turn3 (all of check's) of schema s. Each statement also calls
// step_settings, which versions before 6 lack: a schema dropped and made
// again by an older client (whose lock3 and unlock3 have the same names
// but do not check) fails the statement's new plan with 42883, before
// anything runs, and the Locker reads the version and installs again.
func fastSteps(s string) (lock, unlock, check *fastStep) {
	lock = &fastStep{name: "dlock." + s + ".lock3",
		sql:  "SELECT tok, retry, other_lim, voided FROM " + s + ".step_settings(), " + s + ".lock3($1, $2, $3, $4, $5, $6)",
		args: []int{0, 1, 4, 6, 7, 8}, oids: []uint32{oidText, oidText, oidInt8, oidBool, oidInt8, oidText}}
	unlock = &fastStep{name: "dlock." + s + ".unlock3",
		sql:  "SELECT " + s + ".unlock3($1, $2, $3) FROM " + s + ".step_settings()",
		args: []int{0, 1, 3}, oids: []uint32{oidText, oidText, oidInt8}}
	check = &fastStep{name: "dlock." + s + ".check_turn3",
		sql:  "SELECT tok, retry, other_lim, voided FROM " + s + ".step_settings(), " + s + ".check_turn3($1, $2, $3, $4, $5, $6, $7)",
		args: []int{0, 1, 2, 3, 4, 5, 6}, oids: []uint32{oidText, oidText, oidInt8, oidInt8, oidInt8, oidInt8, oidText}}
	lock.plain, unlock.plain = plainSteps(s)
	return lock, unlock, check
}

// plainSteps are the plain statements of an uncontended Lock and Unlock
// of schema s (version 9): one UPDATE of the key's row each, without
// PL/pgSQL and its SET clauses (a third to a half of the server's time in
// lock3 and unlock3), in the implicit transaction of the statement. They
// read nothing but the row, so that a statement that waited for the row's
// lock judges the row as the step it waited for left it (PostgreSQL
// evaluates the WHERE again on the row's new version, while a subquery
// would keep the statement's first snapshot): n (see schema.sql) says
// the key has no entry and no tombstone, which the functions' fast paths
// read from entries and voids.
//
// The lock grants the key (with lock3's fast path's token, times and
// cleared note and pending) when its row holds no live grant and n = 0;
// the unlock clears o's live grant when n = 0 (nobody to wake). A missing
// row, an unknown n (NULL), a held key: no row, and lock3 or unlock3
// runs.
//
// Each first locks the row FOR UPDATE (the CTE r), as every step does,
// and then updates it: a user's transaction at repeatable read whose
// holds_grant (FOR KEY SHARE) meets a grant made or ended since its
// snapshot then fails (40001). A plain UPDATE of these columns alone is a
// no-key update, which FOR KEY SHARE lets by: holds_grant would read the
// released grant from its snapshot and say true
// (TestEnv38HoldsGrantRepeatableRead).
//
// The session's settings are in r's WHERE, as a filter evaluated
// once before the row is read (without r's row the UPDATE changes
// nothing): at another isolation level than read
// committed (where a statement that finds the row updated fails with
// 40001 instead of reading it again), with synchronous_commit off or
// local (a crash would lose a grant the client was told of) or with a
// statement_timeout (which would fail a step waiting for a busy key) the
// statement changes nothing, and the function refuses with DL001 as
// before. A read-only session fails the UPDATE before it runs (25006),
// taken as that refusal. A lock_timeout can only fail the wait for the
// row (55P03, nothing changed): the function runs then. Every object is
// named with its schema (OPERATOR(pg_catalog.=) and so on), so the
// session's search_path cannot put another's operators in the statement.
//
// The clock is read once, when the statement starts, which may be before
// it waits for the row: a grant is judged expired only if it was so then
// (never too early), and the new grant's expiry counts from then, after
// the client sent the request, from which the client counts its lease.
// Tokens are lock3's: max(counter + 1, clock in µs).
func plainSteps(s string) (lock, unlock *fastStep) {
	const settings = " AND pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.=) 'read committed'" +
		" AND pg_catalog.current_setting('synchronous_commit') OPERATOR(pg_catalog.<>) 'off'" +
		" AND pg_catalog.current_setting('synchronous_commit') OPERATOR(pg_catalog.<>) 'local'" +
		" AND pg_catalog.current_setting('statement_timeout') OPERATOR(pg_catalog.=) '0'"
	const next = "GREATEST(COALESCE(x.counter, 0) OPERATOR(pg_catalog.+) 1, c.us)"
	row := "WITH r AS MATERIALIZED (SELECT 1 FROM " + s + ".keys y WHERE y.key OPERATOR(pg_catalog.=) $1" + settings + " FOR UPDATE) "
	lock = &fastStep{name: "dlock." + s + ".lock9",
		sql: row + "UPDATE " + s + ".keys x SET counter = " + next + ", token = " + next + ", holder = $2, since = c.t," +
			" expires = c.t OPERATOR(pg_catalog.+) ($3 OPERATOR(pg_catalog.*) '1 microsecond'::pg_catalog.interval)," +
			" pending = NULL, note = NULL" +
			" FROM (SELECT a.t, (EXTRACT(epoch FROM a.t) OPERATOR(pg_catalog.*) 1000000)::pg_catalog.int8 AS us" +
			" FROM (SELECT pg_catalog.clock_timestamp() AS t) a) c, r" +
			" WHERE x.key OPERATOR(pg_catalog.=) $1 AND (x.holder IS NULL OR NOT x.expires OPERATOR(pg_catalog.>) c.t)" +
			" AND x.n OPERATOR(pg_catalog.=) 0" +
			" RETURNING x.token, 0::pg_catalog.int8, 0::pg_catalog.int8, false",
		args: []int{0, 1, 4}, oids: []uint32{oidText, oidText, oidInt8}}
	unlock = &fastStep{name: "dlock." + s + ".unlk9", // not .unlock9: see fastStep.name
		sql: row + "UPDATE " + s + ".keys x SET holder = NULL, since = NULL, expires = NULL, pending = NULL, note = NULL FROM r" +
			" WHERE x.key OPERATOR(pg_catalog.=) $1 AND x.holder OPERATOR(pg_catalog.=) $2" +
			" AND x.expires OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp() AND x.n OPERATOR(pg_catalog.=) 0" +
			" RETURNING true",
		args: []int{0, 1}, oids: []uint32{oidText, oidText}}
	return lock, unlock
}

// fastOn says whether a step on pc may try its fast form.
func (d *pgDriver) fastOn(pc *pgconn.PgConn) bool {
	return d.mode == nil && !d.wrapAll.Load() && pc.CustomData()[wrappedKey] == nil
}

// runFast runs f with the step's args on pc. done is false when the step
// was not run and is to be sent wrapped (a refusal, nothing changed);
// otherwise rows and err are the step's.
func (d *pgDriver) runFast(ctx context.Context, pc *pgconn.PgConn, f *fastStep, args []any) (rows [][][]byte, done bool, err error) {
	vals, err := textValues(f.args, args)
	if err != nil {
		return nil, true, err
	}
	// The statement's description, kept from its Prepare, gives its
	// result's columns: Bind, Execute and Sync go without a Describe, and
	// no RowDescription comes back with each run.
	cd := pc.CustomData()
	sd, _ := cd[f.name].(*pgconn.StatementDescription)
	if sd == nil {
		sd, err = pc.Prepare(ctx, f.name, f.sql, f.oids)
		if err == nil {
			cd[f.name] = sd
		}
	}
	if err == nil {
		rows, err = readRows(pc.ExecStatement(ctx, sd, vals, nil, nil))
	}
	if err == nil {
		return rows, true, nil
	}
	var pe *pgconn.PgError
	switch {
	case !errors.As(err, &pe):
	case pe.Code == errRefusedFast || pe.Code == errReadOnly:
		d.fastRefusals.Add(1)
		cd[wrappedKey] = true
		return nil, false, nil
	case pe.Code == "26000" || pe.Code == "42P05": // invalid_sql_statement_name, duplicate_prepared_statement
		d.wrapAll.Store(true)
		delete(cd, f.name)
		return nil, false, nil
	case pe.Code == errResultChanged:
		cd[wrappedKey] = true
		return nil, false, nil
	}
	return rows, true, err
}

// readRows reads rr's rows, each column as text (NULL as nil), into one
// buffer a row, and closes rr: what rr.Read().Rows holds, without the
// result's field descriptions and a copy of each value. A step's one
// short row (every fast step's) takes one allocation, a rowBuf.
func readRows(rr *pgconn.ResultReader) ([][][]byte, error) {
	var rows [][][]byte
	for rr.NextRow() {
		vs := rr.Values()
		n := 0
		for _, v := range vs {
			n += len(v)
		}
		var buf []byte
		var row [][]byte
		if rows == nil && len(vs) <= len(rowBuf{}.vals) && n <= len(rowBuf{}.buf) {
			rb := new(rowBuf)
			rows, row, buf = rb.rows[:0:1], rb.vals[:len(vs):len(vs)], rb.buf[:n:n]
		} else {
			buf = make([]byte, n) // not nil: an empty value is not NULL
			row = make([][]byte, len(vs))
		}
		n = 0
		for i, v := range vs {
			if v != nil {
				row[i] = buf[n : n+len(v) : n+len(v)]
				n += copy(row[i], v)
			}
		}
		rows = append(rows, row)
	}
	_, err := rr.Close()
	return rows, err
}

// rowBuf holds a result's first row, when it is short: the rows' slice,
// the row's values and their bytes in one allocation.
type rowBuf struct {
	rows [1][][]byte
	vals [4][]byte
	buf  [48]byte
}

// textValues are the arguments of args at idx in PostgreSQL's text format,
// in one buffer, which a step's usual arguments share with the values'
// slice (one allocation, an argBuf).
func textValues(idx []int, args []any) ([][]byte, error) {
	n := 0
	for _, a := range idx {
		switch v := args[a].(type) {
		case string:
			n += len(v)
		case int64:
			n += 20
		case bool:
			n += 5
		default:
			return nil, fmt.Errorf("postgres: a fast step's argument of type %s", typeName(v))
		}
	}
	var buf []byte
	var vals [][]byte
	if len(idx) <= len(argBuf{}.vals) && n <= len(argBuf{}.buf) {
		ab := new(argBuf)
		buf, vals = ab.buf[:0:n], ab.vals[:len(idx):len(idx)]
	} else {
		buf, vals = make([]byte, 0, n), make([][]byte, len(idx))
	}
	for i, a := range idx {
		start := len(buf)
		switch v := args[a].(type) {
		case string:
			buf = append(buf, v...)
		case int64:
			buf = strconv.AppendInt(buf, v, 10)
		case bool:
			buf = strconv.AppendBool(buf, v)
		}
		vals[i] = buf[start:len(buf):len(buf)]
	}
	return vals, nil
}

// argBuf holds a step's arguments in text, when they are short (keys
// of up to about 50 bytes): the values' slice and their bytes.
type argBuf struct {
	vals [8][]byte
	buf  [128]byte
}
