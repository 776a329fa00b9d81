// Package postgres is the dlock driver for PostgreSQL (10 or later):
// fenced, renewable leases, shared leases, semaphores, named owners,
// Resume and Inspect, with waiters served in arrival order and woken by
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
// keys (one row per key: its fencing counter, and the row every step on
// the key locks), entries (the key's grants and waiters in arrival order)
// and voids (tombstones of attempts whose clean-up ran before a late
// request). Every step is one call of a PL/pgSQL function in a
// transaction of its own, so one round trip; schema.sql is the wire
// format, described next to the code. Expiry is judged by the server's
// clock_timestamp() after the key's row is locked, and a grant expires
// at that time plus the TTL, so it never outlives what the client counts
// on (which counts from the moment it sent the request). A fencing token
// is max(counter + 1, the server's clock in microseconds), taken under
// the row lock: tokens rise across restores and failovers, on the same
// scale as the Redis drivers'.
//
// Advisory locks are not used: a session's advisory lock has no
// deadline, so a client that stalls keeps it while it cannot know it
// still holds it (no Done before another holder is possible), it is lost
// silently with its connection, and it is re-entrant per session. See
// docs/design.md.
//
// Keys are stored as they are, in text columns; a key holding a NUL byte,
// which PostgreSQL's text cannot hold, is refused with lock.ErrInvalid.
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
// false, and a stale holder's write never commits.
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
// lock.Open makes no connection; the first call does.
//
// # Schema made by hand
//
// A Locker creates its schema on first use if it is missing, which needs
// the CREATE right on the database. Where the application's role may
// not, run the output of SchemaSQL once as a role that may, and set
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
// within one transaction. Every step is one statement, so it is one
// transaction, and the check of a lease in your own transaction works
// as it does without a pooler.
package postgres
