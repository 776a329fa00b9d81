package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/jackc/pgx/v5/pgconn"
)

var _ driver.SetAcquirer = (*pgDriver)(nil)

// setQueries are the statements of a set's step (see AcquireSet), of
// schema s, for the keys ks (sorted): prepare makes the keys' missing rows
// and locks them all (see lockRows); undo ends the grants of owners os at
// keys ks (pairwise) unless every one of the n keys is held by its owner.
func setQueries(s string, ks []string, plain bool) (prepare, undo string, err error) {
	arr, err := literal(ks)
	if err != nil {
		return "", "", err
	}
	prepare = "INSERT INTO " + s + ".keys (key) SELECT u.k FROM pg_catalog.unnest(" + arr + ") AS u(k) ORDER BY u.k ON CONFLICT (key) DO NOTHING; " +
		lockRows(s, arr, plain)
	undo = "UPDATE " + s + ".keys x SET holder = NULL, since = NULL, expires = NULL, pending = NULL, note = NULL" +
		" FROM unnest($1, $2) AS u(k, o) WHERE x.key = u.k AND x.holder = u.o" +
		" AND (SELECT count(*) FROM " + s + ".keys y, unnest($1, $2) AS v(k, o) WHERE y.key = v.k AND y.holder = v.o) < $3"
	return prepare, undo, nil
}

// lockRounds bounds the rounds of lockRows that wait for a busy row.
const lockRounds = 8

// lockRows is a DO block that locks the rows of the keys of arr (an SQL
// array literal) FOR UPDATE, in the order of the key column, without
// holding any of them while it waits for another: it tries them all with
// NOWAIT, and when one is busy it waits for each row alone, in a
// subtransaction that it rolls back (releasing the row), and tries again.
// A set that held its first rows while it waited for a later one would
// wait in a cycle with a user's transaction that checked the later key
// with holds_grant and then checks an earlier one (PostgreSQL would fail
// one of them after deadlock_timeout), and would stop the renewals of
// the rows it held (FOR NO KEY UPDATE waits for FOR UPDATE) for as long
// as it waited. After lockRounds rounds that found a row busy it locks
// them in order as one statement (holding the first while it waits for
// the next), so that a set on keys other steps keep busy still makes
// progress, and one transaction never opens more than about
// 2·lockRounds subtransactions (beyond 64, every session's snapshots
// overflow their cache). The body is dollar-quoted with a tag that arr
// does not contain.
//
// A DO block needs the language plpgsql's USAGE (PUBLIC's by default; a
// function of it needs only EXECUTE): where a DBA revoked it, plain is
// true, and the rows are locked as one SELECT ... ORDER BY key FOR
// UPDATE, which holds the rows it locked while it waits for the next.
func lockRows(s, arr string, plain bool) string {
	if plain {
		return "SELECT x.key FROM " + s + ".keys x WHERE x.key = ANY (" + arr + ") ORDER BY x.key FOR UPDATE"
	}
	tag := "$dlock$"
	for i := 0; strings.Contains(arr, tag); i++ {
		tag = "$dlock" + strconv.Itoa(i) + "$"
	}
	return "DO " + tag + " DECLARE ks text[] := " + arr + "; k text; n int := 0; BEGIN LOOP" +
		" n := n + 1; IF n > " + strconv.Itoa(lockRounds) + " THEN" +
		" PERFORM 1 FROM " + s + ".keys x WHERE x.key = ANY (ks) ORDER BY x.key FOR UPDATE; RETURN; END IF;" +
		" BEGIN PERFORM 1 FROM " + s + ".keys x WHERE x.key = ANY (ks) ORDER BY x.key FOR UPDATE NOWAIT; RETURN;" +
		" EXCEPTION WHEN lock_not_available THEN NULL; END;" +
		" FOR k IN SELECT x.key FROM " + s + ".keys x WHERE x.key = ANY (ks) ORDER BY x.key LOOP" +
		" BEGIN PERFORM 1 FROM " + s + ".keys x WHERE x.key = k FOR UPDATE; RAISE SQLSTATE 'DL002';" +
		" EXCEPTION WHEN SQLSTATE 'DL002' THEN NULL; END;" +
		" END LOOP; END LOOP; END " + tag
}

// AcquireSet implements driver.SetAcquirer: one step (one transaction,
// one simple-protocol query, one round trip) of the wrapped form (see
// run):
//
//	BEGIN ...; SELECT set_config(...);
//	INSERT the keys' missing rows; DO: lock them all FOR UPDATE (lockRows);
//	SELECT ... FROM lock3(key, owner, ttl, false, ...)   for each key
//	UPDATE keys: undo the set's grants unless every key is granted;
//	COMMIT
//
// lock3 without queueing is Acquire's own step: it grants a key only
// where a TryLock would (no live grant, no waiter, no tombstone of the
// owner), in the key's row, with the key's next token. A plain statement
// cannot roll back the ones before it without an error (which the server
// logs, and whose ROLLBACK costs a second round trip), so the last
// statement ends the set's own grants when one key was refused: what
// commits then is what a refused TryLock of each key leaves (expired
// grants and entries purged, an empty row; counters moved on, which only
// raises the floor of later tokens). No one sees the grants in between:
// the rows stay locked until the COMMIT.
//
// The rows are locked before any lock3, all at once, and never held
// while the step waits for another (see lockRows): a set waits in no
// cycle with another set, a renewal batch, or a user's transaction that
// checks leases with holds_grant in any order, and does not stop the
// renewals of its other keys while it waits for a busy one.
//
// A lost reply: lock releases each lease by owner (release3), which ends
// the grant if the set committed it, and otherwise leaves a tombstone
// that a late copy of the step meets (lock3 then reports the attempt
// voided, and the set undoes itself).
func (d *pgDriver) AcquireSet(ctx context.Context, ls []*driver.Lease) error {
	if err := driver.CheckSet(ls); err != nil {
		return err
	}
	for _, l := range ls {
		l.Data, l.Token = nil, 0
	}
	if err := d.ready(ctx); err != nil {
		for _, l := range ls {
			l.Data = notSent{}
		}
		return unreachable(err)
	}
	keys, owners := make([]string, len(ls)), make([]string, len(ls))
	for i, l := range ls {
		keys[i], owners[i] = l.Key, l.Owner
	}
	plain := d.setRowsPlain.Load()
	prepare, undo, err := setQueries(d.schema, keys, plain)
	if err != nil {
		return err
	}
	calls := make([]string, 1, len(ls)+2)
	for _, l := range ls {
		call, err := bind(d.q.fastAcquire, []any{l.Key, l.Owner, int64(driver.Exclusive), int64(0), micros(l.TTL), false, false, micros(entryLife), ""})
		if err != nil {
			return err
		}
		calls = append(calls, call)
	}
	last, err := bind(undo, []any{keys, owners, int64(len(ls))})
	if err != nil {
		return err
	}
	calls[0] = prepare
	calls = append(calls, last)
	res, err := d.runCalls(ctx, strings.Join(calls, "; "), len(ls)+3)
	if err != nil && !plain && noLanguage(err) {
		// Refused before it changed anything (the transaction rolled
		// back): from now on without the DO block.
		d.setRowsPlain.Store(true)
		return d.AcquireSet(ctx, ls)
	}
	if err != nil {
		return unreachable(err)
	}
	d.tick()
	var (
		refused   *driver.HeldError
		abandoned bool
		taken     int64
	)
	for i, l := range ls {
		r, err := row1(res[2+i].Rows, 4)
		if err != nil {
			return err
		}
		var s step
		if s.token, err = textInt(r[0]); err == nil {
			s.retry, err = textInt(r[1])
		}
		if err != nil {
			return err
		}
		s.voided = textBool(r[3])
		switch {
		case s.voided:
			abandoned = true
		case s.token > 0:
			l.Token, l.Validity = uint64(s.token), time.Duration(micros(l.TTL))*time.Microsecond
			taken++
		case refused == nil:
			refused = &driver.HeldError{}
			fallthrough
		default:
			if after := time.Duration(s.retry)*time.Millisecond + time.Millisecond; s.retry > 0 && (refused.RetryAfter == 0 || after < refused.RetryAfter) {
				refused.RetryAfter = after
			}
		}
	}
	granted := refused == nil && !abandoned
	if undone := res[len(res)-1].CommandTag.RowsAffected(); granted && undone != 0 || !granted && undone != taken {
		return fmt.Errorf("%w: the set's undo ended %d grants of %d", errShape, undone, taken)
	}
	if granted {
		return nil
	}
	for _, l := range ls {
		l.Token, l.Validity = 0, 0
	}
	if abandoned {
		return errAbandoned
	}
	return refused
}

// noLanguage: err is the server's refusal of a DO block to a role
// without USAGE on its language (the message names plpgsql in every
// lc_messages; its other words are translated).
func noLanguage(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42501" && strings.Contains(pe.Message, "plpgsql")
}
