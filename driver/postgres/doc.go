// Package postgres is the dlock driver for PostgreSQL (10 or later):
// fenced, renewable leases, shared leases, semaphores, named owners,
// Resume, Inspect and grant notes, with waiters served in arrival order and woken by
// LISTEN/NOTIFY, in ordinary tables of the database a team already runs.
//
//	pool, err := pgxpool.New(ctx, "postgres://app:secret@db:5432/app")
//	...
//	locker := postgres.New(pool, nil)
//
// or, with the URL alone, lock.Open(ctx, "postgres://app:secret@db:5432/app?ttl=15s").
//
// # How it works
//
// The state lives in three tables of the schema "dlock" (Options.Schema):
// keys (one row per key: its fencing counter, its exclusive grant, and
// the row every step on the key locks), entries (the key's waiters,
// shared grants, permits and named owners' grants in arrival order) and
// voids (tombstones of attempts whose clean-up ran before a late
// request). Every step is one call of a PL/pgSQL function in a
// transaction of its own, sent as one query message (one round trip). An
// exclusive Lock of a free key and the Unlock of a grant nobody waits
// behind are one UPDATE of the key's row each (a HOT update: no index
// entry, no dead row for autovacuum to find). schema.sql is the wire
// format, described next to the code. Expiry is
// judged by the server's clock_timestamp() after the key's row is
// locked, and a grant expires at that time plus the TTL, so it never
// outlives what the client counts on (which counts from the moment it
// sent the request). A fencing token is max(counter + 1, the server's
// clock in microseconds), taken under the row lock: tokens rise across
// restores and failovers, on the same scale as the Redis drivers'.
//
// Advisory locks are not used: a session's advisory lock has no
// deadline, so a client that stalls keeps it while it cannot know it
// still holds it (no Done before another holder is possible), it is lost
// silently with its connection, and it is re-entrant per session. See
// docs/wire/postgres.md.
//
// Keys are stored as they are, in text columns; a key holding a NUL byte,
// which PostgreSQL's text cannot hold, is refused with lock.ErrInvalid.
//
// # Settings the driver sets itself
//
// Each step is sent as BEGIN ISOLATION LEVEL READ COMMITTED READ WRITE,
// a set_config of the transaction's statement_timeout, lock_timeout and
// idle_in_transaction_session_timeout to 0 and of synchronous_commit to
// on when it is off or local, the step's SELECT with its arguments as
// literals, and COMMIT, in one simple-protocol query. So a database's or
// role's default_transaction_isolation (repeatable read or serializable,
// under which a step's snapshot predates its wait for the key and two
// holders could be granted), default_transaction_read_only, timeouts
// (on PostgreSQL 13 and later, which time each statement of a query on
// its own) or synchronous_commit = off (a crash lost grants) do not
// change what a step does; the call's context bounds it instead. The
// functions refuse to run at another isolation level, so that an older
// client, or a call by hand, under such a default fails instead of
// granting twice. A step that fails leaves its connection idle (rolled
// back) in the pool. The connection's client_encoding must be UTF8 (as
// pgx wants for its own simple-protocol queries): the step's arguments
// are literals in its text. Another encoding fails with lock.ErrInvalid;
// set client_encoding=UTF8 in the connection string.
//
// # The fast form
//
// An exclusive Lock and its Unlock (lock3 and unlock3, the steps of an
// uncontended lock), and a queued waiter's turn (check_turn3), are first
// sent without the wrapper above: alone, as
// a prepared statement of the connection, in the implicit transaction of
// that statement. The functions check, on the server connection that
// runs them and before they write anything, that the transaction is what
// the wrapper would make it (read committed, synchronous_commit on or
// stronger, no statement_timeout, read write; lock_timeout they set
// themselves), and refuse otherwise with SQLSTATE DL001. The driver then
// sends the step wrapped on that connection, and every later step of the
// connection too. So a role's or database's defaults, a SET on a shared
// pool, or a pooler that lends a server connection with another client's
// session cost one refused round trip per connection, never a grant
// judged by an old snapshot or committed asynchronously. To have the fast
// form under such defaults, set the steps' settings in the connection
// string, which pgx sends as the session's (for example
// statement_timeout=0&synchronous_commit=on). Under the
// server's default settings a Lock and Unlock cost about half of the
// wrapped form (see docs/performance.md). With Options.TransactionPooling
// nothing is prepared and every step is wrapped; a Locker whose prepared
// statement goes missing (SQLSTATE 26000 or 42P05: a pooler the Locker
// was not told of, a reset session) wraps every step from then on; one
// whose plan would return other types than its Prepare described
// (SQLSTATE 0A000: a column's or a function's result type changed) wraps
// its connection's steps.
//
// Since schema version 9 the Lock and Unlock first send a plain UPDATE
// of the key's row (see plainSteps), which grants or releases an
// uncontended key without PL/pgSQL, and the function only when it
// changes nothing. It reads only the key's row, where keys.n counts the
// key's entries and tombstones (kept by triggers on entries and voids,
// whoever writes them), and its WHERE carries the same session checks:
// a session the functions would refuse gets no row from it.
//
// # Waiting through failures
//
// A queued Lock rides out connection failures (a restart of PostgreSQL
// or PgBouncer, a network cut, a connection closed by
// idle_session_timeout) for 15 s: its steps report the key held and
// lock steps again every 100 ms. Past 15 s the failure ends the wait in
// the queue, and lock follows its outage rule (package lock, Outages):
// the Lock tries again, under a new owner, until its context ends. The
// waiter's place lives 3 s after its last step: a longer failure puts it
// at the end of the queue. A TryLock fails at once, with
// lock.ErrUnavailable.
//
// A call its context ends drops its connection's socket at once, where
// pgx (v5.11 and later) would drain it for up to 15 s with the pool's
// slot taken. The pool's own health-check ping, run by Acquire with the
// caller's context, is covered only in pools lock.Open makes (through
// pgxpool.Config.BeforeClose); a pool given to New can do the same:
// BeforeClose closing c.PgConn().Conn() when c.IsClosed().
//
// # Sweep
//
// A key's expired entries and tombstones go at the key's next step, and
// a sweep deletes what keys used once leave: the rows of keys whose last
// grant is a minute old and that no live grant, waiter, tombstone or
// holds_grant transaction depends on (it skips rows others have locked).
// Tokens do not go back: the next token of such a key is the clock in
// µs, above a counter a minute behind it. Each Locker sweeps in the
// background, one sweep at a time (at most 500 keys, 20-35 ms for 500
// on a loaded 2-core machine), after every 200 steps and renewals, and
// on its first step 10 s after its last sweep. The tables also have
// their own autovacuum thresholds.
//
// # Checking a lease in your own transaction
//
// When the data a lock guards lives in the same database, check the
// lease inside the transaction that writes it:
//
//	SELECT dlock.holds_grant($1, $2)   -- key, lease.Token()
//
// It returns true while the grant with that token is live and still the
// key's, and it locks the key's row in share mode, so no other grant of
// the key can be made until your transaction ends: roll back when it is
// false, and a stale holder's write never commits. It works at any
// isolation level, with one difference at repeatable read and
// serializable: a shared lease or permit (kept in entries) released after
// your transaction's snapshot still reads as held, since its release
// only locks the key's row; no grant of the key can be made until your
// transaction ends all the same (every grant updates that row, which
// then fails your transaction with 40001), so no other holder writes.
//
// What a long transaction that called it costs: renewals go on (it locks
// the key's row FOR KEY SHARE, which a renewal does not wait for), so no
// lease is lost; but every step on that key waits until the transaction
// ends: Lock, TryLock and Unlock of the key, a waiter's turn, the purge
// of its expired grant, and the sweep of the key. Keep such transactions
// short; a call's context bounds its wait.
//
// # Notifications
//
// Each Locker listens on a channel of its own (the schema's name, _ and
// 12 random hex digits), kept in its waiters' entries: a release wakes
// the connection of the Locker whose waiter is next, not every Locker's.
// A notification only wakes: the waiter's own step asks the server.
//
// A release hands the key over in its own transaction when the first
// waiter is an exclusive one (hand3 in schema.sql): it deletes the
// waiter's entry, writes the waiter's grant in the key's row with the
// key's next token, marked pending and expiring with the entry (three
// heartbeats after the waiter's last step), and notifies the waiter. The
// waiter's next step (check_turn3) finds the grant in the row, confirms
// it and sets its expiry from its own TTL. A waiter that never steps
// again loses the grant as it would have lost its place in the queue.
// hand3 and keys.pending came with schema version 4; its functions
// answer version 3 clients as version 3's did.
//
// # Upgrading the schema
//
// Version 8 (this one) writes out, in the bodies of the steps, the SQL
// helper functions they called (which PostgreSQL planned again in every
// transaction): the same SQL, names, arguments and results, so version
// 7 and 8 clients share keys during an upgrade.
//
// Version 7 adds grant notes (lock.WithNote): a note column
// in keys and in entries, cleared by every function that grants or ends
// a grant in the row, carried from a waiter's entry to the row by hand3
// and check_turn3, and written by a version 7 client with a note in the
// step's own transaction (a second statement of the wrapped step). The
// functions keep their names, arguments and results: a version 6 client,
// which reads version 7 and installs nothing, calls them as before,
// stores no note and inherits none.
//
// Version 9 adds keys.n and its triggers (made, and every existing row
// counted, in the install's transaction with entries and voids locked
// against writers), so that version 8 clients, which call the same
// functions, share keys with version 9 ones: their writes are counted
// by the triggers whatever function body runs them.
//
// Version 6 makes lock3, unlock3 and check_turn3 check the session's
// settings themselves (see "The fast form" above), with the same names,
// arguments and results: clients of versions 3 to 5 work with it
// unchanged, and a version 6 client sends the fast form only once it has
// read version 6 or later (and each fast statement names step_settings,
// so a schema made again by an older client fails it, not runs it
// unchecked). Version 5 closes version 2's ways back in: a version 2 step
// blocked behind the install runs its old body after the install
// commits, and that body's next_token now fails before it grants; a
// version 2 client that read no schema and installs after a newer one
// fails, as begin_key's result type changed (42P13), and its install
// rolls back whole; and an install reads the version again under its
// lock and leaves a newer schema alone. Version 4 added hand3 and
// keys.pending to version 3: version 3, 4 and 5 clients work with each
// other's functions (same names, arguments and results). Version 3 keeps a
// key's exclusive grant in its keys row, which version 2 clients do not
// read. A version 3 client installs its script over version 2 (adding
// columns, and its functions under new names: acquire3, release3, ...)
// and replaces every function of version 2 by one that fails with
// "schema version 3 replaced the functions of version 2": a version 2
// client still running fails loudly (its grants end at their TTL)
// instead of granting a key that a version 3 client holds. The install's
// ALTER TABLE waits for the steps under way, and a version 2 step that
// starts after it calls the failing functions. Upgrade every client of a
// schema together; holds_grant keeps its name and answers for both.
// With Options.NoCreate, run the new SchemaSQL first.
//
// # URLs
//
//	postgres://[user[:password]@]host[:port][/database][?parameters]
//	postgresql://...
//
// Parameters dlock reads (the others are pgx's connection string, sslmode
// and pool_max_conns included):
//
//	ttl, autorenew     as for every scheme (see lock.Open)
//	schema=NAME        Options.Schema
//	create_schema=false Options.NoCreate
//	pooling=transaction Options.TransactionPooling (PgBouncer's
//	                   pool_mode=transaction; session is the default)
//	tls_*              TLS with dlock's file parameters (see lock.Open),
//	                   instead of pgx's sslmode, sslrootcert, ...
//
// lock.Open makes no connection; the first call does. pgx sends a
// parameter it does not know to the server as a run-time setting
// (application_name=, search_path=): a misspelt one, or another scheme's
// (prefix=), passes Open and fails the first call, with the server's
// "unrecognized configuration parameter".
//
// # Schema made by hand
//
// A Locker creates its schema on first use if it is missing, which needs
// the CREATE right on the database. Where the application's role may
// not, run the output of SchemaSQL (or of dlock schema URL, the same
// SQL with the URL's schema name) once as a role that may, and set
// Options.NoCreate (create_schema=false); the application's role then
// needs USAGE on the schema, SELECT, INSERT, UPDATE and DELETE on its
// tables, and EXECUTE on its functions (the default for PUBLIC).
//
// # PgBouncer
//
// In session pooling mode nothing changes. In transaction pooling mode,
// set Options.TransactionPooling (pooling=transaction): a LISTEN does not
// stay on one server connection there, so waiters check the key every
// second instead of being woken, and the driver's statements are sent
// unnamed (pgx.QueryExecModeExec), which every PgBouncer version keeps
// within one transaction. A step is one query (nothing prepared: the
// fast form is off) ending with its COMMIT, so it is one transaction, and
// the check of a lease in your own transaction works as it does without a
// pooler.
package postgres
