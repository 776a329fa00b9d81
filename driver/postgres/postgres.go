package postgres

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/lock"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultSchema is the schema of dlock's tables and functions when
// Options.Schema is empty.
const DefaultSchema = "dlock"

// schemaVersion is what schema.sql's version() returns.
const schemaVersion = 9

//go:embed schema.sql
var schemaSQL string

// entryLife is how long a waiter's queue entry lives after its last step:
// lock steps every waiter at least every driver.Heartbeat, so an entry
// not renewed for three of them belongs to a waiter that died or is cut
// off, and is skipped.
const entryLife = 3 * driver.Heartbeat

// Options configure a Locker over PostgreSQL.
type Options struct {
	lock.Options
	// Schema holds dlock's tables and functions (DefaultSchema when
	// empty): a lower-case SQL identifier, at most 50 bytes. It also
	// begins the name of each Locker's channel of notifications
	// (Schema_ and 12 random hex digits). Lockers that must exclude each
	// other need the same Schema.
	Schema string
	// NoCreate: the schema was made by hand (SchemaSQL); the Locker never
	// creates or updates it, and its calls fail with a message saying so
	// when it is missing or of another version. Without it, the first
	// call of a Locker that finds the schema missing creates it, which
	// needs the CREATE right on the database.
	NoCreate bool
	// TransactionPooling: the pool's connections go through a pooler
	// that lends a server connection for one transaction at a time
	// (PgBouncer's pool_mode=transaction). A LISTEN does not stay on one
	// server connection there, and named prepared statements are not
	// kept, so waiters are not woken by notifications (they check the key
	// every driver.Heartbeat, a second, instead), and the statements other
	// than steps (a step is one simple-protocol query) are sent with
	// pgx.QueryExecModeExec (an unnamed statement, prepared and run in one
	// exchange).
	TransactionPooling bool
}

var schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,49}$`)

// SchemaSQL returns the SQL script that creates dlock's schema under the
// name schema (DefaultSchema when empty), for a user who creates schema
// by hand and sets Options.NoCreate. It can run again: every statement
// is CREATE ... IF NOT EXISTS, CREATE OR REPLACE, or a DROP ... IF EXISTS
// before its CREATE.
func SchemaSQL(schema string) (string, error) {
	if schema == "" {
		schema = DefaultSchema
	}
	if !schemaName.MatchString(schema) {
		return "", fmt.Errorf("%w: postgres: schema %q: want a lower-case SQL identifier (letters, digits, _), at most 50 bytes", lock.ErrInvalid, schema)
	}
	return strings.ReplaceAll(schemaSQL, "{{schema}}", schema), nil
}

// New returns a Locker over pool. Its Close releases its leases and
// leaves pool open. Each Locker also keeps one connection of its own,
// made with pool's ConnConfig, for LISTEN (unless
// Options.TransactionPooling).
func New(pool *pgxpool.Pool, o *Options) *lock.Locker {
	d, lo := newDriver(pool, o, false)
	return lock.New(d, lo)
}

// pgDriver implements driver.Driver and its optional capabilities over a
// pgx pool, with the functions of schema.sql.
type pgDriver struct {
	pool   *pgxpool.Pool
	owned  bool  // Close closes pool
	err    error // an option error, returned by every call
	schema string
	create bool
	ln     *listener // nil with Options.TransactionPooling
	q      queries
	mode   []any // the first arguments of every query: pgx.QueryExecModeExec with TransactionPooling

	installing chan struct{} // held (one value in it) by the call that reads or installs the schema
	installed  atomic.Bool
	damaged    atomic.Bool // a step found part of the schema gone
	sweep      *sweeper
	rides      rides

	fastLock, fastUnlock, fastCheck *fastStep    // lock3, unlock3, check_turn3 unwrapped (see fastStep)
	wrapAll                         atomic.Bool  // a prepared statement failed: every step is wrapped
	fastRuns                        atomic.Int64 // fast steps run (tests read it)
	plainRuns                       atomic.Int64 // plain fast steps that granted or released (see plainSteps)
	fastRefusals                    atomic.Int64 // fast steps refused by the session's settings
	setRowsPlain                    atomic.Bool  // a set's DO block was refused: sets lock their rows as one SELECT (see lockRows)
}

var (
	_ driver.Driver         = (*pgDriver)(nil)
	_ driver.Queuer         = (*pgDriver)(nil)
	_ driver.BatchRefresher = (*pgDriver)(nil)
	_ driver.Resumer        = (*pgDriver)(nil)
	_ driver.Inspector      = (*pgDriver)(nil)
)

// queries are the statements of the driver's steps, for its schema.
type queries struct {
	version, acquire, fastAcquire, check, release, fastRelease, refresh, resume, sweep, inspect, note string
}

func newQueries(s string) queries {
	return queries{
		version:     "SELECT " + s + ".version()",
		acquire:     "SELECT tok, retry, other_lim, voided FROM " + s + ".acquire3($1, $2, $3, $4, $5, $6, $7, $8, $9)",
		fastAcquire: "SELECT tok, retry, other_lim, voided FROM " + s + ".lock3($1, $2, $5, $7, $8, $9)", // acquire's arguments
		check:       "SELECT tok, retry, other_lim, voided FROM " + s + ".check_turn3($1, $2, $3, $4, $5, $6, $7)",
		release:     "SELECT " + s + ".release3($1, $2, $3, $4, $5)",
		fastRelease: "SELECT " + s + ".unlock3($1, $2, $4)", // release's arguments
		refresh:     "SELECT " + s + ".refresh3($1, $2, $3)",
		resume:      "SELECT " + s + ".resume3($1, $2, $3, $4, $5, $6, $7)",
		sweep:       "SELECT " + s + ".sweep3($1, $2)",
		// note is the second statement of a step with a note (see
		// stepNoted): owner $2's grant at key $1 in the row, or its entry
		// (granted, or waiting: a hand-over carries it to the row), gets
		// note $3. A named owner's later holds have no entry of their own,
		// and leave the first hold's note.
		note: "WITH r AS (UPDATE " + s + ".keys x SET note = $3 WHERE x.key = $1 AND x.holder = $2)" +
			" UPDATE " + s + ".entries e SET note = $3 WHERE e.key = $1 AND e.owner = $2",
		// Inspect's statement is not a step: it names pg_catalog's objects
		// itself, whatever the session's search_path (see run).
		// The row's grant comes first (seq 0; entries' seq start at 1).
		inspect: "SELECT owner, mode, lim, granted, token, left_, since, joined, holds, note FROM (" +
			"SELECT x.holder AS owner, 0::smallint AS mode, 0 AS lim, true AS granted, x.token, x.expires OPERATOR(pg_catalog.-) c.t AS left_," +
			" x.since, x.since AS joined, -1 AS holds, x.note, 0::bigint AS seq FROM " + s + ".keys x, (SELECT pg_catalog.clock_timestamp() AS t) c" +
			" WHERE x.key OPERATOR(pg_catalog.=) $1 AND x.holder IS NOT NULL AND x.expires OPERATOR(pg_catalog.>) c.t UNION ALL " +
			"SELECT e.owner, e.mode, e.lim, e.granted, e.token, e.expires OPERATOR(pg_catalog.-) c.t, e.since, e.joined," +
			" coalesce(pg_catalog.cardinality(e.holds), -1), e.note, e.seq FROM " + s + ".entries e, (SELECT pg_catalog.clock_timestamp() AS t) c" +
			" WHERE e.key OPERATOR(pg_catalog.=) $1 AND e.expires OPERATOR(pg_catalog.>) c.t) a ORDER BY seq",
	}
}

func newDriver(pool *pgxpool.Pool, o *Options, owned bool) (*pgDriver, *lock.Options) {
	var opts Options
	if o != nil {
		opts = *o
	}
	d := &pgDriver{pool: pool, owned: owned, schema: opts.Schema, create: !opts.NoCreate, installing: make(chan struct{}, 1), sweep: newSweeper()}
	if d.schema == "" {
		d.schema = DefaultSchema
	}
	if !schemaName.MatchString(d.schema) {
		d.err = fmt.Errorf("%w: postgres: Options.Schema %q: want a lower-case SQL identifier (letters, digits, _), at most 50 bytes", driver.ErrInvalid, d.schema)
	}
	if pool == nil {
		d.err = fmt.Errorf("%w: postgres: nil *pgxpool.Pool", driver.ErrInvalid)
	}
	d.q = newQueries(d.schema)
	d.fastLock, d.fastUnlock, d.fastCheck = fastSteps(d.schema)
	if opts.TransactionPooling {
		d.mode = []any{pgx.QueryExecModeExec}
	} else if d.err == nil {
		d.ln = newListener(pool.Config().ConnConfig, channelName(d.schema))
	}
	return d, &opts.Options
}

// Capabilities implements driver.Capable. pgx stops a query when its
// context ends, and the one wait of the driver's own, for the schema's
// install, does too.
func (d *pgDriver) Capabilities() driver.Caps {
	return driver.Caps{Name: "postgres", ReturnsAtContextEnd: true,
		Shared: driver.Yes, Permits: driver.Yes, Reentry: driver.Yes, Resume: driver.Yes,
		Notes: driver.Yes}
}

// As gives access to the pool: a **pgxpool.Pool target is set to it.
func (d *pgDriver) As(target any) bool {
	if p, ok := target.(**pgxpool.Pool); ok {
		*p = d.pool
		return true
	}
	return false
}

// Validate refuses keys PostgreSQL's text cannot hold.
func (d *pgDriver) Validate(l *driver.Lease) error {
	if d.err != nil {
		return d.err
	}
	if strings.IndexByte(l.Key, 0) >= 0 {
		return fmt.Errorf("%w: postgres: the key holds a NUL byte, which PostgreSQL's text cannot", driver.ErrInvalid)
	}
	return nil
}

// ready makes sure the schema exists at this driver's version or a later
// one (whose functions keep this version's behaviour), creating or
// updating it unless Options.NoCreate. It runs once per driver after a
// success.
func (d *pgDriver) ready(ctx context.Context) error {
	_, err := d.check(ctx, true)
	return err
}

// check is ready, and with install unset, it creates nothing and reports
// whether the schema is there (Inspect's: reading changes nothing).
func (d *pgDriver) check(ctx context.Context, install bool) (bool, error) {
	if d.err != nil {
		return false, d.err
	}
	if d.installed.Load() {
		return true, nil
	}
	// Waits for another call's install as long as ctx lasts (see Capabilities).
	select {
	case d.installing <- struct{}{}:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	defer func() { <-d.installing }()
	if d.installed.Load() {
		return true, nil
	}
	v, err := d.readVersion(ctx)
	// After a step found part of the schema gone, the script runs again
	// (it makes only what is missing) unless a later version made it.
	redo := d.damaged.Load() && install && d.create && v == schemaVersion
	if err == nil && v >= schemaVersion && !redo {
		d.installed.Store(true)
		d.damaged.Store(false)
		return true, nil
	}
	var pe *pgconn.PgError
	missing := errors.As(err, &pe) && schemaMissing(pe.Code)
	switch {
	case err != nil && !missing:
		return false, fmt.Errorf("postgres: reading the version of schema %s: %w%s", d.schema, err, usageHint(err, d.schema))
	case !install && err == nil:
		// Inspect: the tables of an older version may lack what this
		// client reads, and reading them as none would report a held key
		// free.
		return false, fmt.Errorf("postgres: schema %s is at version %d, older than this client's %d: a Lock or TryLock of this client installs it (or run its SQL: %s); Inspect does not read an older one", d.schema, v, schemaVersion, schemaSource(d.schema))
	case !install:
		return false, nil
	case !d.create:
		have := "missing"
		if err == nil {
			have = fmt.Sprintf("at version %d", v)
		}
		return false, &notInstalled{fmt.Errorf("postgres: schema %s is %s, and Options.NoCreate (create_schema=false) is set: run its SQL (version %d) as a role with the CREATE right; %s", d.schema, have, schemaVersion, schemaSource(d.schema))}
	}
	if err := d.install(ctx); err != nil {
		return false, fmt.Errorf("postgres: creating schema %s: %w%s", d.schema, err, createHint(err, d.schema))
	}
	d.installed.Store(true)
	d.damaged.Store(false)
	return true, nil
}

// notInstalled is check's error when the schema is missing or old and
// NoCreate forbids making it: a refusal to fix, not a connection failure.
type notInstalled struct{ error }

func (e *notInstalled) Unwrap() error { return e.error }

// refused reports whether err is the server's insufficient_privilege.
func refused(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42501"
}

// usageHint says what a role that may not use the schema needs.
func usageHint(err error, schema string) string {
	if !refused(err) {
		return ""
	}
	return fmt.Sprintf(" (the role needs USAGE on schema %s, SELECT, INSERT, UPDATE and DELETE on its tables, and EXECUTE on its functions)", schema)
}

// createHint says what to do when the role may not create or update
// the schema.
func createHint(err error, schema string) string {
	if !refused(err) {
		return ""
	}
	return fmt.Sprintf(" (the role needs the CREATE right on the database, and to own the schema's objects to update them; "+
		"or have a role that may run the schema's SQL once, and set create_schema=false in the URL (Options.NoCreate); %s)", schemaSource(schema))
}

// schemaSource says where a DBA gets the SQL of schema.
func schemaSource(schema string) string {
	url := "URL"
	if schema != DefaultSchema {
		url = "URL with schema=" + schema
	}
	return fmt.Sprintf("dlock schema %s prints it, as postgres.SchemaSQL(%q) returns it", url, schema)
}

// install runs schema.sql in one transaction, under a transaction-level
// advisory lock so that Lockers starting together do not replace the
// same functions at once. The transaction is read-write, at read
// committed, without timeouts, as a step's is (see run).
func (d *pgDriver) install(ctx context.Context) error {
	script, err := SchemaSQL(d.schema)
	if err != nil {
		return err
	}
	opts := pgx.TxOptions{IsoLevel: pgx.ReadCommitted, AccessMode: pgx.ReadWrite}
	return pgx.BeginTxFunc(ctx, d.pool, opts, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, stepSettings, d.mode...); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext($1))", d.args("dlock schema "+d.schema)...); err != nil {
			return err
		}
		// Another client may have installed while this one waited for
		// the lock: a newer version is not to be replaced by this one's.
		if v, err := d.installedVersion(ctx, tx); err != nil || v > schemaVersion {
			return err
		}
		_, err := tx.Exec(ctx, script)
		return err
	})
}

// installedVersion is the schema's version() as tx sees it, 0 when the
// schema has none.
func (d *pgDriver) installedVersion(ctx context.Context, tx pgx.Tx) (int, error) {
	var has bool
	err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = $1 AND p.proname = 'version' AND p.pronargs = 0)`, d.args(d.schema)...).Scan(&has)
	if err != nil || !has {
		return 0, err
	}
	var v int
	err = tx.QueryRow(ctx, d.q.version, d.mode...).Scan(&v)
	return v, err
}

// args are a query's arguments, after d.mode.
func (d *pgDriver) args(a ...any) []any {
	if d.mode == nil {
		return a
	}
	return append(d.mode, a...)
}

func micros(d time.Duration) int64 { return max(d.Microseconds(), 1) }

// step is the result of acquire and check_turn (see schema.sql).
type step struct {
	token    int64
	retry    int64 // ms
	otherLim int64
	voided   bool
}

// errAbandoned: the attempt's tombstone is there. Only a clean-up of the
// same attempt (a Release or Leave that found nothing) leaves one, and
// lock makes no step after it: a step that meets it is one that reached
// the server late.
var errAbandoned = errors.New("postgres: the attempt was already ended by its clean-up")

// outcome turns a step's result into the Queuer's and Acquire's answer,
// filling l when granted.
func outcome(l *driver.Lease, s step) error {
	switch {
	case s.voided:
		return errAbandoned
	case s.otherLim > 0:
		return fmt.Errorf("%w: the key is a semaphore of %d permits, not %d", driver.ErrInvalid, s.otherLim, l.Limit)
	case s.token > 0:
		l.Token = uint64(s.token)
		l.Validity = time.Duration(micros(l.TTL)) * time.Microsecond
		return nil
	}
	var after time.Duration
	if s.retry > 0 {
		after = time.Duration(s.retry)*time.Millisecond + time.Millisecond
	}
	return &driver.HeldError{RetryAfter: after}
}

// step runs acquire or check_turn (see run), trying f's fast form first
// when f is not nil, and reads its result.
func (d *pgDriver) step(ctx context.Context, f *fastStep, query string, args ...any) (step, error) {
	rows, err := d.runStep(ctx, f, query, args)
	if err != nil {
		return step{}, err
	}
	d.tick()
	return readStep(rows)
}

// stepNoted is step for l: when l has a note, the step is sent wrapped,
// with a second statement that stores the note with what the step left
// of l.Owner at l.Key (its grant, or its entry in the queue), in the
// step's transaction.
func (d *pgDriver) stepNoted(ctx context.Context, l *driver.Lease, f *fastStep, query string, args ...any) (step, error) {
	if l.Note == "" {
		return d.step(ctx, f, query, args...)
	}
	call, err := bind(query, args)
	if err != nil {
		return step{}, err
	}
	note, err := bind(d.q.note, []any{l.Key, l.Owner, l.Note})
	if err != nil {
		return step{}, err
	}
	res, err := d.runCalls(ctx, call+"; "+note, 2)
	if err != nil {
		return step{}, err
	}
	d.tick()
	return readStep(res[0].Rows)
}

// readStep reads the one row of acquire3, lock3 or check_turn3.
func readStep(rows [][][]byte) (step, error) {
	r, err := row1(rows, 4)
	if err != nil {
		return step{}, err
	}
	var s step
	if s.token, err = textInt(r[0]); err == nil {
		if s.retry, err = textInt(r[1]); err == nil {
			s.otherLim, err = textInt(r[2])
		}
	}
	s.voided = textBool(r[3])
	return s, err
}

// boolStep runs a step that returns one boolean (release, resume), as
// step does.
func (d *pgDriver) boolStep(ctx context.Context, f *fastStep, query string, args ...any) (bool, error) {
	rows, err := d.runStep(ctx, f, query, args)
	if err != nil {
		return false, err
	}
	d.tick()
	r, err := row1(rows, 1)
	if err != nil {
		return false, err
	}
	return textBool(r[0]), nil
}

// notSent marks, in driver.Lease.Data, an attempt that failed before it
// sent its step (reading or making the schema failed): it granted
// nothing, and the clean-up Release that follows needs no round trip.
type notSent struct{}

func (d *pgDriver) acquire(ctx context.Context, l *driver.Lease, queue bool) error {
	l.Data = nil
	if err := d.ready(ctx); err != nil {
		l.Data = notSent{}
		return err
	}
	query, f := d.q.acquire, (*fastStep)(nil)
	if l.Mode == driver.Exclusive && !l.Reentry {
		query, f = d.q.fastAcquire, d.fastLock
	}
	s, err := d.stepNoted(ctx, l, f, query, l.Key, l.Owner, int64(l.Mode), int64(l.Limit), micros(l.TTL), l.Reentry, queue, micros(entryLife), d.channel())
	if err != nil {
		return err
	}
	return outcome(l, s)
}

// Acquire makes one attempt: a grant when the key's entries allow it
// (see schema.sql), otherwise a *driver.HeldError.
func (d *pgDriver) Acquire(ctx context.Context, l *driver.Lease) error {
	return unreachable(d.acquire(ctx, l, false))
}

// Join implements driver.Queuer: an attempt that, when the key is held,
// leaves l's entry at the end of the key's queue. The listener knows l's
// wake channel before the request goes, so no notification is missed.
func (d *pgDriver) Join(ctx context.Context, l *driver.Lease, wake chan<- struct{}) error {
	if d.ln != nil {
		d.ln.add(l.Owner, wake)
	}
	err := d.ride(ctx, l.Owner, d.acquire(ctx, l, true))
	if err == nil && d.ln != nil {
		d.ln.remove(l.Owner)
	}
	return err
}

// Check implements driver.Queuer.
func (d *pgDriver) Check(ctx context.Context, l *driver.Lease) error {
	if err := d.ready(ctx); err != nil {
		return d.ride(ctx, l.Owner, err)
	}
	s, err := d.stepNoted(ctx, l, d.fastCheck, d.q.check, l.Key, l.Owner, int64(l.Mode), int64(l.Limit), micros(l.TTL), micros(entryLife), d.channel())
	if err != nil {
		return d.ride(ctx, l.Owner, err)
	}
	d.endRide(l.Owner)
	err = outcome(l, s)
	if err == nil && d.ln != nil {
		d.ln.remove(l.Owner)
	}
	return err
}

// Leave implements driver.Queuer: it deletes l's entry, granted or not,
// and leaves a tombstone, so that a step of l's still on its way (held in
// the network or a pooler) changes nothing when it lands.
func (d *pgDriver) Leave(ctx context.Context, l *driver.Lease) error {
	d.endRide(l.Owner)
	if d.ln != nil {
		d.ln.remove(l.Owner)
	}
	_, err := d.release(ctx, l, false, true)
	return err
}

// Release deletes l's grant (l's hold, for a named owner's), and hands
// the key on by waking the waiters it lets in. After an Acquire whose
// outcome is unknown (l.Token unset) that never sent its step, there is
// nothing to release: it returns ErrNotHeld without a round trip.
func (d *pgDriver) Release(ctx context.Context, l *driver.Lease) error {
	if _, ok := l.Data.(notSent); ok && l.Token == 0 {
		return driver.ErrNotHeld
	}
	ok, err := d.release(ctx, l, l.Reentry, false)
	if err == nil && !ok {
		return driver.ErrNotHeld
	}
	return err
}

func (d *pgDriver) release(ctx context.Context, l *driver.Lease, reentrant, leave bool) (bool, error) {
	if err := d.ready(ctx); err != nil {
		return false, err
	}
	query, f := d.q.release, (*fastStep)(nil)
	if !reentrant && !leave {
		query, f = d.q.fastRelease, d.fastUnlock
	}
	return d.boolStep(ctx, f, query, l.Key, l.Owner, reentrant, micros(l.TTL), leave)
}

// channel is the NOTIFY channel of this Locker's waiters (” without a
// listener: nobody is notified).
func (d *pgDriver) channel() string {
	if d.ln == nil {
		return ""
	}
	return d.ln.channel
}

// Refresh extends l's grant to at least ttl from now.
func (d *pgDriver) Refresh(ctx context.Context, l *driver.Lease, ttl time.Duration) (time.Duration, error) {
	v, errs := d.RefreshBatch(ctx, []*driver.Lease{l}, ttl)
	return v, errs[0]
}

// RefreshBatch implements driver.BatchRefresher: one statement extends
// every grant of ls that is still live.
func (d *pgDriver) RefreshBatch(ctx context.Context, ls []*driver.Lease, ttl time.Duration) (time.Duration, []error) {
	errs := make([]error, len(ls))
	fail := func(err error) (time.Duration, []error) {
		for i := range errs {
			errs[i] = err
		}
		return 0, errs
	}
	if err := d.ready(ctx); err != nil {
		return fail(err)
	}
	keys, owners := make([]string, len(ls)), make([]string, len(ls))
	for i, l := range ls {
		keys[i], owners[i] = l.Key, l.Owner
	}
	extended, err := d.refresh(ctx, keys, owners, ttl)
	if err != nil {
		return fail(err)
	}
	for i, l := range ls {
		if extended[l.Owner] {
			continue
		}
		errs[i] = driver.ErrNotHeld
		if len(ls) > 1 { // its row may have been locked (refresh3 skips it): wait for it alone
			one, err := d.refresh(ctx, keys[i:i+1], owners[i:i+1], ttl)
			if err != nil || one[l.Owner] {
				errs[i] = err
			}
		}
	}
	return time.Duration(micros(ttl)) * time.Microsecond, errs
}

// refresh runs refresh3 on keys and owners (pairwise) and returns the
// owners it extended.
func (d *pgDriver) refresh(ctx context.Context, keys, owners []string, ttl time.Duration) (map[string]bool, error) {
	rows, err := d.run(ctx, d.q.refresh, keys, owners, micros(ttl))
	if err != nil {
		return nil, err
	}
	d.tick()
	extended := make(map[string]bool, len(rows))
	for _, r := range rows {
		if len(r) == 1 {
			extended[string(r[0])] = true
		}
	}
	return extended, nil
}

// Resume implements driver.Resumer: it extends l.Owner's grant if it has
// l's mode, limit and token.
func (d *pgDriver) Resume(ctx context.Context, l *driver.Lease) error {
	if err := d.ready(ctx); err != nil {
		return err
	}
	ok, err := d.boolStep(ctx, nil, d.q.resume, l.Key, l.Owner, int64(l.Mode), int64(l.Limit), int64(l.Token), l.Reentry, micros(l.TTL))
	if err != nil {
		return err
	}
	if !ok {
		return driver.ErrNotHeld
	}
	l.Validity = time.Duration(micros(l.TTL)) * time.Microsecond
	return nil
}

// Close stops the listener, and closes the pool if the Locker made it.
func (d *pgDriver) Close() error {
	d.sweep.close()
	if d.ln != nil {
		d.ln.close()
	}
	if d.owned && d.pool != nil {
		d.pool.Close()
	}
	return nil
}

// readVersion reads the schema's version on a connection of the pool.
func (d *pgDriver) readVersion(ctx context.Context) (int, error) {
	c, err := d.pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer c.Release()
	var v int
	err = c.QueryRow(ctx, d.q.version, d.mode...).Scan(&v)
	dropIfEnded(ctx, c.Conn().PgConn())
	return v, err
}
