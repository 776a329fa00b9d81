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
// connection, and sends every later step of that connection wrapped. When
// a prepared statement is missing or already there under its name
// (26000, 42P05: a transaction pooler lent another server connection,
// or the session was reset), the Locker sends every later step wrapped.
// With Options.TransactionPooling nothing is prepared: every step is
// wrapped.
type fastStep struct {
	name string   // the prepared statement's name on each connection
	sql  string   // its text, $1, $2, ... the arguments picked by args
	args []int    // the indexes, in the step's arguments, of its parameters
	oids []uint32 // their types
}

// Parameter types of the fast steps.
const (
	oidBool = 16
	oidInt8 = 20
	oidText = 25
)

// errRefusedFast is step_settings' SQLSTATE.
const errRefusedFast = "DL001"

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
	return lock, unlock, check
}

// fastOn says whether a step on pc may try its fast form.
func (d *pgDriver) fastOn(pc *pgconn.PgConn) bool {
	return d.mode == nil && !d.wrapAll.Load() && pc.CustomData()[wrappedKey] == nil
}

// runFast runs f with the step's args on pc. done is false when the step
// was not run and is to be sent wrapped (a refusal, nothing changed);
// otherwise rows and err are the step's.
func (d *pgDriver) runFast(ctx context.Context, pc *pgconn.PgConn, f *fastStep, args []any) (rows [][][]byte, done bool, err error) {
	vals := make([][]byte, len(f.args))
	for i, a := range f.args {
		if vals[i], err = textValue(args[a]); err != nil {
			return nil, true, err
		}
	}
	cd := pc.CustomData()
	if cd[f.name] == nil {
		_, err = pc.Prepare(ctx, f.name, f.sql, f.oids)
		if err == nil {
			cd[f.name] = true
		}
	}
	if err == nil {
		res := pc.ExecPrepared(ctx, f.name, vals, nil, nil).Read()
		rows, err = res.Rows, res.Err
	}
	var pe *pgconn.PgError
	switch {
	case !errors.As(err, &pe):
	case pe.Code == errRefusedFast:
		d.fastRefusals.Add(1)
		cd[wrappedKey] = true
		return nil, false, nil
	case pe.Code == "26000" || pe.Code == "42P05": // invalid_sql_statement_name, duplicate_prepared_statement
		d.wrapAll.Store(true)
		delete(cd, f.name)
		return nil, false, nil
	}
	if err == nil {
		d.fastRuns.Add(1)
	}
	return rows, true, err
}

// textValue is a step argument in PostgreSQL's text format.
func textValue(a any) ([]byte, error) {
	switch v := a.(type) {
	case string:
		return []byte(v), nil
	case int64:
		return strconv.AppendInt(nil, v, 10), nil
	case bool:
		return []byte(strconv.FormatBool(v)), nil
	}
	return nil, fmt.Errorf("postgres: a fast step's argument of type %T", a)
}
