-- dlock's state on PostgreSQL, version 9 (see version() below): the tables and functions of
-- driver/postgres. The driver runs this script (with {{schema}} replaced by
-- Options.Schema, "dlock" by default) the first time a Locker finds the
-- functions missing; a user who creates schema by hand runs the output of
-- postgres.SchemaSQL instead. Every statement can run again.
--
-- Every function runs with search_path = pg_catalog, pg_temp: operators
-- and functions resolve to the built-in ones, never to objects a role
-- with CREATE on some schema of the caller's search_path has made.
--
-- Every step of a lease is one call of one of the functions below, in a
-- transaction of its own: it first locks the key's row of keys
-- (begin_key3, or lock3's and unlock3's fast paths), so steps on one key
-- run one at a time, and it judges every expiry by
-- clock_timestamp() taken after that lock (never now(), which is the
-- transaction's start). The transaction is READ COMMITTED (the driver
-- begins it so, whatever the defaults): each statement sees what
-- committed before it, the steps this one waited for included. The
-- functions refuse to run at another level (at_read_committed), where a
-- step's snapshot is older than its wait. lock3, unlock3 and
-- check_turn3 may also be called on their own, in the implicit
-- transaction of one statement (the driver's fast form): they check the session's settings first
-- (step_settings) and refuse, with SQLSTATE DL001, where those are not
-- what the driver's BEGIN would have made them. Since version 9 the
-- driver sends an uncontended Lock and Unlock as plain UPDATEs of the
-- key's row first (see keys.n and queries.plainLock in driver/postgres),
-- and a call of lock3 or unlock3 only when they change nothing.

CREATE SCHEMA IF NOT EXISTS {{schema}};

-- keys: one row per key ever used. counter is the last fencing token
-- given for the key, NULL once lost (a restore from an old backup, an
-- operator's delete): tokens are max(counter + 1, clock in microseconds),
-- so they keep rising, on the Redis drivers' scale. The row is also the
-- key's lock. It holds the key's exclusive grant (of an owner that is not
-- a named one's hold): holder, its token, since and expires; holder is
-- NULL when there is none. Only key is indexed and the table leaves half
-- of each page free, so that a grant, a renewal and a release are HOT
-- updates (no index entry, the dead version pruned on its page).
CREATE TABLE IF NOT EXISTS {{schema}}.keys (
    key     text PRIMARY KEY,
    counter bigint
);
ALTER TABLE {{schema}}.keys ADD COLUMN IF NOT EXISTS holder text, ADD COLUMN IF NOT EXISTS token bigint,
    ADD COLUMN IF NOT EXISTS since timestamptz, ADD COLUMN IF NOT EXISTS expires timestamptz;
-- pending: the grant was handed over by its predecessor's release
-- (hand3) and its holder has not confirmed it yet; it expires with the
-- holder's queue entry, and the holder's next step (check_turn3) sets
-- its expiry from the holder's TTL. NULL otherwise.
ALTER TABLE {{schema}}.keys ADD COLUMN IF NOT EXISTS pending boolean;
-- note (version 7): the grant's note (lock.WithNote), NULL for none. A
-- step that grants in the row clears it (grant_row, lock3), and the
-- client that asked for a note sets it in the same transaction, after the
-- step (a second statement of its wrapped step: queries.note in
-- driver/postgres); a hand-over (hand3) and a waiter's turn (check_turn3)
-- carry the waiter's entry's note to the row; every step that ends the
-- row's grant clears it. Clients of version 6, which call the same
-- functions, store no note and never leave one behind.
ALTER TABLE {{schema}}.keys ADD COLUMN IF NOT EXISTS note text;
-- n (version 9): how many rows of entries and voids the key has, NULL
-- when not known (a new row, a TRUNCATE). The triggers below keep it,
-- whoever writes entries or voids (every function of every version, a
-- sweep, an operator's DELETE), in the writer's transaction and under
-- the key's row lock (the trigger updates the row), so a statement that
-- waited for that lock re-reads it with the row (EvalPlanQual) where a
-- subquery on entries would keep its older snapshot. The driver's plain
-- fast Lock grants only where n = 0, its plain Unlock releases only
-- there; a NULL n is counted by the next step that locks the row
-- (begin_key3, lock3), in a statement whose snapshot is taken under the
-- lock. n may be above the truth (it then only sends steps to the
-- functions), never below: an entry or tombstone needs its key's row
-- (the trigger refuses one without it).
ALTER TABLE {{schema}}.keys ADD COLUMN IF NOT EXISTS n bigint;

-- entries: the waiters of each key, its shared grants, permits and named
-- owners' grants (not its exclusive grant, which is in keys), in arrival
-- order (seq).
-- mode: 0 exclusive, 1 shared, 2 a semaphore permit of lim permits.
-- A grant has granted, its token, since (when granted) and expires (when
-- it ends unless renewed); a waiter has joined, and expires 3 heartbeats
-- after its last step (a dead waiter's entry is skipped after that).
-- holds are the owner tokens of a named owner's holds (lock.WithOwner),
-- NULL for other grants. An entry is granted when the entries before it
-- allow (fits): an exclusive one when it is first, a shared one when only
-- shared ones are before it, a permit when fewer than lim permits, and
-- nothing else, are before it; none while the key's row holds a grant.
-- chan is the channel of the waiter's Locker ('' for none): wake
-- notifies it there.
CREATE TABLE IF NOT EXISTS {{schema}}.entries (
    key     text        NOT NULL,
    seq     bigint      GENERATED ALWAYS AS IDENTITY,
    owner   text        NOT NULL,
    mode    smallint    NOT NULL,
    lim     integer     NOT NULL DEFAULT 0,
    granted boolean     NOT NULL DEFAULT false,
    token   bigint      NOT NULL DEFAULT 0,
    expires timestamptz NOT NULL,
    since   timestamptz,
    joined  timestamptz NOT NULL,
    holds   text[],
    PRIMARY KEY (key, owner)
);
ALTER TABLE {{schema}}.entries ADD COLUMN IF NOT EXISTS chan text NOT NULL DEFAULT '';
-- note (version 7): the note of the entry's grant, or of the waiter's
-- grant to come (see keys.note), NULL for none; a named owner's grant
-- keeps its first hold's.
ALTER TABLE {{schema}}.entries ADD COLUMN IF NOT EXISTS note text;
CREATE INDEX IF NOT EXISTS entries_queue ON {{schema}}.entries (key, seq);

-- voids: tombstones of attempts that are over (a Release or Leave found
-- nothing of theirs). A grant or queue step of a voided owner that
-- reaches the server late (delayed on the network, or in a pooler) is
-- refused, so it cannot leave a grant or an entry nobody will release.
CREATE TABLE IF NOT EXISTS {{schema}}.voids (
    key     text        NOT NULL,
    owner   text        NOT NULL,
    expires timestamptz NOT NULL,
    PRIMARY KEY (key, owner)
);

-- count_entries is the row trigger of entries and voids that keeps
-- keys.n: +1 for a row of the key inserted (or moved to it), -1 for one
-- deleted (or moved away). A row whose key has no row in keys is
-- refused: counted nowhere, it would be missed when the key's row is
-- made. No SET clause (it would be paid on every entry): the body names
-- pg_catalog's operators itself.
CREATE OR REPLACE FUNCTION {{schema}}.count_entries() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP OPERATOR(pg_catalog.<>) 'INSERT' THEN
        UPDATE {{schema}}.keys x SET n = x.n OPERATOR(pg_catalog.-) 1 WHERE x.key OPERATOR(pg_catalog.=) OLD.key;
    END IF;
    IF TG_OP OPERATOR(pg_catalog.<>) 'DELETE' THEN
        UPDATE {{schema}}.keys x SET n = x.n OPERATOR(pg_catalog.+) 1 WHERE x.key OPERATOR(pg_catalog.=) NEW.key;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'dlock: a row of %.% for key %, which has no row in %.keys', TG_TABLE_SCHEMA, TG_TABLE_NAME, NEW.key, TG_TABLE_SCHEMA
                USING HINT = 'dlock makes the key''s row first; a key''s entries and tombstones count in its row (keys.n)';
        END IF;
    END IF;
    RETURN NULL;
END $$;

-- forget_counts makes every n unknown after a TRUNCATE of entries or
-- voids (which fires no row trigger): the next step on each key counts
-- again.
CREATE OR REPLACE FUNCTION {{schema}}.forget_counts() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    UPDATE {{schema}}.keys SET n = NULL WHERE n IS NOT NULL;
    RETURN NULL;
END $$;

-- The triggers and the count of every existing row are made in this
-- script's transaction, with entries and voids locked against writers
-- (the ALTER TABLEs above already hold keys and entries): a step of an
-- older client cannot add an entry between the count and the trigger.
-- Steps that started before wait for the script (they lock keys first)
-- and run after it commits, with the triggers.
LOCK TABLE {{schema}}.entries, {{schema}}.voids IN SHARE ROW EXCLUSIVE MODE;
DROP TRIGGER IF EXISTS count_entries ON {{schema}}.entries;
CREATE TRIGGER count_entries AFTER INSERT OR DELETE OR UPDATE OF key ON {{schema}}.entries
    FOR EACH ROW EXECUTE FUNCTION {{schema}}.count_entries();
DROP TRIGGER IF EXISTS count_voids ON {{schema}}.voids;
CREATE TRIGGER count_voids AFTER INSERT OR DELETE OR UPDATE OF key ON {{schema}}.voids
    FOR EACH ROW EXECUTE FUNCTION {{schema}}.count_entries();
DROP TRIGGER IF EXISTS forget_counts ON {{schema}}.entries;
CREATE TRIGGER forget_counts AFTER TRUNCATE ON {{schema}}.entries
    FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.forget_counts();
DROP TRIGGER IF EXISTS forget_counts ON {{schema}}.voids;
CREATE TRIGGER forget_counts AFTER TRUNCATE ON {{schema}}.voids
    FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.forget_counts();
-- A key's row renamed (an operator's UPDATE of keys.key) takes no count
-- along: the key it now is may have entries the old one had not
-- (TestAudit46MovedEntries). An AFTER trigger: a BEFORE row trigger
-- would fetch and lock the row in every UPDATE of keys, whatever its
-- columns, before its column list is looked at.
CREATE OR REPLACE FUNCTION {{schema}}.forget_count() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    UPDATE {{schema}}.keys x SET n = NULL WHERE x.key = NEW.key;
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS forget_count ON {{schema}}.keys;
CREATE TRIGGER forget_count AFTER UPDATE OF key ON {{schema}}.keys
    FOR EACH ROW EXECUTE FUNCTION {{schema}}.forget_count();
-- The triggers fire ALWAYS, in a session whose session_replication_role
-- is replica too (a replication or migration tool, a superuser's bulk
-- fix), where an ordinary trigger does not: an entry written there would
-- otherwise not be counted, and the plain Lock would grant beside it
-- (TestAudit46ReplicaRoleEntries). Disabling them (ALTER TABLE ...
-- DISABLE TRIGGER) leaves n below the truth: after enabling them again,
-- UPDATE keys SET n = NULL has every key counted again.
ALTER TABLE {{schema}}.entries ENABLE ALWAYS TRIGGER count_entries;
ALTER TABLE {{schema}}.voids ENABLE ALWAYS TRIGGER count_voids;
ALTER TABLE {{schema}}.entries ENABLE ALWAYS TRIGGER forget_counts;
ALTER TABLE {{schema}}.voids ENABLE ALWAYS TRIGGER forget_counts;
ALTER TABLE {{schema}}.keys ENABLE ALWAYS TRIGGER forget_count;
UPDATE {{schema}}.keys x SET n = (SELECT count(*) FROM {{schema}}.entries e WHERE e.key = x.key)
    + (SELECT count(*) FROM {{schema}}.voids v WHERE v.key = x.key);

-- The three tables are small and churn: vacuum them after a few hundred
-- changed rows, not a fifth of the table (a backstop: grants and
-- releases update keys in place).
ALTER TABLE {{schema}}.keys SET (fillfactor = 50, autovacuum_vacuum_scale_factor = 0.05, autovacuum_vacuum_threshold = 500);
ALTER TABLE {{schema}}.entries SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 500,
    autovacuum_analyze_scale_factor = 0.05);
ALTER TABLE {{schema}}.voids SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 500);

-- at_read_committed refuses a step in a transaction of another isolation
-- level (a client older than version 2 under a database's or role's
-- default_transaction_isolation, or a call by hand): there a step's
-- snapshot is taken before it waits for the key's row, and it would not
-- see the entries the steps it waited for committed. Since version 9
-- it also refuses a session whose session_replication_role is not
-- origin (a superuser's, or a replication tool's): there the triggers
-- that count a key's entries in its row (keys.n) do not fire.
CREATE OR REPLACE FUNCTION {{schema}}.at_read_committed() RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'dlock: a step must run at transaction isolation read committed, not %', current_setting('transaction_isolation')
            USING HINT = 'dlock clients of schema version 2 or later begin their steps so; an older client runs at the default of the database or role';
    END IF;
    IF current_setting('session_replication_role') <> 'origin' THEN
        RAISE EXCEPTION 'dlock: a step must run with session_replication_role origin, not %', current_setting('session_replication_role')
            USING HINT = 'the triggers that count each key''s entries in keys.n fire only there';
    END IF;
END $$;

-- step_settings refuses, with SQLSTATE DL001 and before anything is
-- written, a step whose transaction is not what the driver's wrapper
-- (BEGIN ISOLATION LEVEL READ COMMITTED READ WRITE and its set_config)
-- makes it: another isolation level (see at_read_committed), a commit
-- that would not wait for its WAL flush (synchronous_commit off or
-- local: a crash would lose a grant the client was told of), a
-- statement_timeout (it would fail a step that waits for a busy key) or
-- a read-only transaction. The driver sends lock3, unlock3 and
-- check_turn3 without the wrapper, as one prepared statement, and on
-- DL001 sends the same step again wrapped on that connection (a session
-- with such defaults, or a server connection a pooler lent with someone
-- else's settings).
-- lock_timeout is set by the callers' SET clause, not checked.
CREATE OR REPLACE FUNCTION {{schema}}.step_settings() RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'dlock: a step must run at transaction isolation read committed, not %', current_setting('transaction_isolation')
            USING ERRCODE = 'DL001',
                  HINT = 'dlock clients of schema version 2 or later begin their steps so; an older client runs at the default of the database or role';
    END IF;
    IF current_setting('synchronous_commit') IN ('off', 'local') OR current_setting('statement_timeout') <> '0'
        OR current_setting('transaction_read_only') <> 'off' THEN
        RAISE EXCEPTION 'dlock: a step must run with synchronous_commit on, statement_timeout 0, read write; not synchronous_commit %, statement_timeout %, transaction_read_only %',
            current_setting('synchronous_commit'), current_setting('statement_timeout'), current_setting('transaction_read_only')
            USING ERRCODE = 'DL001', HINT = 'dlock clients send the step again in a transaction that sets them';
    END IF;
END $$;

-- fits: may an entry of mode m (of lim permits) be granted after n live
-- entries, all shared (sh) or all permits (pm)?
CREATE OR REPLACE FUNCTION {{schema}}.fits(m bigint, lim bigint, n bigint, sh boolean, pm boolean)
RETURNS boolean LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT (m = 0 AND n = 0) OR (m = 1 AND sh) OR (m = 2 AND pm AND n < lim)
$$;


-- The functions of version 2 (acquire, check_turn, release, refresh,
-- resume, sweep, begin_key, wake) knew no grant in keys: a client of
-- version 2 that still runs them would grant a key its row already
-- holds. Version 3 replaces each with one that fails (a client of
-- version 2 reads version() 3, so it installs nothing and calls them)
-- and runs under new names. Replacing a function waits for no running
-- call, but a step of version 2 calls begin_key after the script's
-- ALTER TABLE, which waits for every step that has used keys and holds
-- back the rest until the script commits: such a step fails too.
CREATE OR REPLACE FUNCTION {{schema}}.superseded() RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RAISE EXCEPTION 'dlock: schema version 3 replaced the functions of version 2, which this client calls'
        USING HINT = 'upgrade every dlock client of this schema to a version that speaks schema version 3';
END $$;
CREATE OR REPLACE FUNCTION {{schema}}.wake(k text) RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN PERFORM {{schema}}.superseded(); END $$;
-- begin_key returns another type than version 2's, so that a version 2
-- client that read no schema and installs after this script committed
-- fails (CREATE OR REPLACE cannot change a result type: 42P13) and its
-- install rolls back whole, instead of putting version 2 back.
DROP FUNCTION IF EXISTS {{schema}}.begin_key(text);
CREATE FUNCTION {{schema}}.begin_key(k text) RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN PERFORM {{schema}}.superseded(); END $$;
CREATE OR REPLACE FUNCTION {{schema}}.acquire(k text, o text, m bigint, lm bigint, ttl bigint, re boolean, q boolean, life bigint,
    OUT tok bigint, OUT retry bigint, OUT other_lim bigint, OUT voided boolean)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN PERFORM {{schema}}.superseded(); END $$;
CREATE OR REPLACE FUNCTION {{schema}}.check_turn(k text, o text, m bigint, lm bigint, ttl bigint, life bigint,
    OUT tok bigint, OUT retry bigint, OUT other_lim bigint, OUT voided boolean)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN PERFORM {{schema}}.superseded(); END $$;
CREATE OR REPLACE FUNCTION {{schema}}.release(k text, o text, re boolean, ttl bigint, leave boolean) RETURNS boolean LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN PERFORM {{schema}}.superseded(); RETURN NULL; END $$;
CREATE OR REPLACE FUNCTION {{schema}}.refresh(ks text[], os text[], ttl bigint) RETURNS SETOF text LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN PERFORM {{schema}}.superseded(); END $$;
CREATE OR REPLACE FUNCTION {{schema}}.resume(k text, o text, m bigint, lm bigint, tk bigint, re boolean, ttl bigint)
RETURNS boolean LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN PERFORM {{schema}}.superseded(); RETURN NULL; END $$;
CREATE OR REPLACE FUNCTION {{schema}}.sweep(lim bigint, keep bigint) RETURNS bigint LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN PERFORM {{schema}}.superseded(); RETURN NULL; END $$;

-- next_token was version 2's, and a version 2 step blocked behind this
-- script's ALTER TABLE runs its old body once the script commits: it
-- calls next_token by name before it grants, and so fails there.
CREATE OR REPLACE FUNCTION {{schema}}.next_token(k text, t timestamptz) RETURNS bigint LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN PERFORM {{schema}}.superseded(); RETURN NULL; END $$;

-- next_token3 takes k's next fencing token: max(counter + 1, t in µs).
CREATE OR REPLACE FUNCTION {{schema}}.next_token3(k text, t timestamptz) RETURNS bigint LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
    UPDATE {{schema}}.keys SET counter = greatest(coalesce(counter, 0) + 1, (extract(epoch FROM t) * 1000000)::bigint)
    WHERE key = k RETURNING counter
$$;

-- void records that o's attempt at k is over, for ttl µs at least.
CREATE OR REPLACE FUNCTION {{schema}}.void(k text, o text, t timestamptz, ttl bigint) RETURNS void LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
    INSERT INTO {{schema}}.voids (key, owner, expires)
    VALUES (k, o, t + greatest(ttl * interval '1 microsecond', interval '1 minute'))
    ON CONFLICT (key, owner) DO UPDATE SET expires = greatest({{schema}}.voids.expires, excluded.expires)
$$;

-- wake3 notifies the waiters of k whose turn has come, each on its
-- Locker's channel, with the waiter's owner token as payload. None has
-- come while k's row holds a grant. The message only wakes: the waiter's
-- own next step finds its turn on the server.
CREATE OR REPLACE FUNCTION {{schema}}.wake3(k text) RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    r  record;
    n  bigint  := 0;
    sh boolean := true;
    pm boolean := true;
BEGIN
    IF EXISTS (SELECT 1 FROM {{schema}}.keys x WHERE x.key = k AND x.holder IS NOT NULL) THEN
        RETURN;
    END IF;
    FOR r IN SELECT e.owner, e.mode, e.lim, e.granted, e.chan FROM {{schema}}.entries e WHERE e.key = k ORDER BY e.seq LOOP
        EXIT WHEN NOT ((r.mode = 0 AND n = 0) OR (r.mode = 1 AND sh) OR (r.mode = 2 AND pm AND n < r.lim)); -- fits, inlined
        IF NOT r.granted AND r.chan <> '' THEN
            PERFORM pg_notify(r.chan, r.owner);
        END IF;
        n := n + 1;
        sh := sh AND r.mode = 1;
        pm := pm AND r.mode = 2;
    END LOOP;
END $$;

-- begin_key3 locks k's row (making it if need be), drops the expired
-- grant of the row and the expired entries and tombstones of k, wakes
-- the waiters that this lets in, and returns the clock every expiry of
-- the step is judged by.
CREATE OR REPLACE FUNCTION {{schema}}.begin_key3(k text) RETURNS timestamptz LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    t      timestamptz;
    purged bigint;
    c      bigint;
BEGIN
    PERFORM {{schema}}.at_read_committed();
    -- The row may be deleted (an operator, a restore, sweep) between the
    -- INSERT and the lock: lock it only once it is seen.
    LOOP
        SELECT x.n INTO c FROM {{schema}}.keys x WHERE x.key = k FOR UPDATE;
        EXIT WHEN FOUND;
        INSERT INTO {{schema}}.keys (key) VALUES (k) ON CONFLICT (key) DO NOTHING;
    END LOOP;
    IF c IS NULL THEN -- count_n, inlined: see keys.n
        UPDATE {{schema}}.keys x SET n = (SELECT count(*) FROM {{schema}}.entries e WHERE e.key = k)
            + (SELECT count(*) FROM {{schema}}.voids v WHERE v.key = k)
        WHERE x.key = k;
    END IF;
    t := clock_timestamp();
    UPDATE {{schema}}.keys x SET holder = NULL, since = NULL, expires = NULL, pending = NULL, note = NULL
    WHERE x.key = k AND x.holder IS NOT NULL AND NOT (x.expires > t);
    GET DIAGNOSTICS purged = ROW_COUNT;
    DELETE FROM {{schema}}.entries e WHERE e.key = k AND e.expires <= t;
    IF purged > 0 OR FOUND THEN
        PERFORM {{schema}}.wake3(k);
    END IF;
    DELETE FROM {{schema}}.voids v WHERE v.key = k AND v.expires <= t;
    RETURN t;
END $$;

-- grant_row, row_held, retry_ms3, next_token3 and fits are written out
-- (as the same SQL) in the steps' bodies since version 8: a SQL function
-- with a SET clause is never inlined, and a PL/pgSQL caller plans its
-- body again in every transaction (50-150 µs a call, several a step, on
-- a hot key's row lock). They stay for the statements that still call
-- them; version 8 changed no function's name, arguments or results.
-- grant_row gives k's row grant to o, for ttl µs from t, with k's next
-- fencing token (max(counter + 1, t in µs)), which it returns.
CREATE OR REPLACE FUNCTION {{schema}}.grant_row(k text, o text, t timestamptz, ttl bigint) RETURNS bigint LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
    UPDATE {{schema}}.keys x SET counter = c.tok, token = c.tok, holder = o, since = t, expires = t + ttl * interval '1 microsecond', pending = NULL,
        note = NULL
    FROM (SELECT greatest(coalesce(y.counter, 0) + 1, (extract(epoch FROM t) * 1000000)::bigint) AS tok FROM {{schema}}.keys y WHERE y.key = k) c
    WHERE x.key = k RETURNING x.token
$$;

-- row_held: does k's row hold a grant (live: begin_key3 dropped an
-- expired one)?
CREATE OR REPLACE FUNCTION {{schema}}.row_held(k text) RETURNS boolean LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
    SELECT coalesce((SELECT x.holder IS NOT NULL FROM {{schema}}.keys x WHERE x.key = k), false)
$$;

-- retry_ms3 is how long until the first grant of k expires (0: none).
CREATE OR REPLACE FUNCTION {{schema}}.retry_ms3(k text, t timestamptz) RETURNS bigint LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
    SELECT coalesce(ceil(extract(epoch FROM least(
        (SELECT min(e.expires) FROM {{schema}}.entries e WHERE e.key = k AND e.granted),
        (SELECT x.expires FROM {{schema}}.keys x WHERE x.key = k AND x.holder IS NOT NULL)) - t) * 1000)::bigint, 0)
$$;

-- acquire3 makes one attempt for owner o at k in mode m (lm permits),
-- for ttl µs; re: o is a hold of a named owner, granted also when the key
-- is granted to another hold of it; q: if held, o joins the queue (its
-- entry lives life µs, and wakes are sent on channel ch). An exclusive
-- grant of an owner that is not a named one's hold goes in k's row.
--
-- The result of acquire3 and check_turn3: tok > 0 when granted;
-- otherwise retry (ms, 0 when unknown) while the key is held; other_lim
-- > 0 when the key's permits have that other limit, and voided when the
-- attempt was already ended by a Release or Leave (nothing changed in
-- both).
CREATE OR REPLACE FUNCTION {{schema}}.acquire3(k text, o text, m bigint, lm bigint, ttl bigint, re boolean, q boolean, life bigint, ch text,
    OUT tok bigint, OUT retry bigint, OUT other_lim bigint, OUT voided boolean)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    t  timestamptz := {{schema}}.begin_key3(k);
    n  bigint;
    sh boolean;
    pm boolean;
BEGIN
    tok := 0; retry := 0; other_lim := 0; voided := false;
    IF EXISTS (SELECT 1 FROM {{schema}}.voids v WHERE v.key = k AND v.owner = o) THEN
        voided := true;
        RETURN;
    END IF;
    IF re THEN
        UPDATE {{schema}}.entries e
        SET holds = CASE WHEN o = ANY (e.holds) THEN e.holds ELSE e.holds || o END,
            expires = greatest(e.expires, t + ttl * interval '1 microsecond')
        WHERE e.key = k AND e.granted AND e.holds IS NOT NULL AND left(e.owner, 16) = left(o, 16)
        RETURNING e.token INTO tok;
        IF FOUND THEN
            RETURN;
        END IF;
    END IF;
    IF m = 2 THEN
        SELECT e.lim INTO other_lim FROM {{schema}}.entries e WHERE e.key = k AND e.lim > 0 AND e.lim <> lm LIMIT 1;
        IF FOUND THEN
            RETURN;
        END IF;
        other_lim := 0;
    END IF;
    SELECT count(*), coalesce(bool_and(e.mode = 1), true), coalesce(bool_and(e.mode = 2), true)
    INTO n, sh, pm FROM {{schema}}.entries e WHERE e.key = k;
    IF EXISTS (SELECT 1 FROM {{schema}}.keys x WHERE x.key = k AND x.holder IS NOT NULL) THEN -- row_held, inlined
        n := n + 1; sh := false; pm := false;
    END IF;
    IF (m = 0 AND n = 0) OR (m = 1 AND sh) OR (m = 2 AND pm AND n < lm) THEN -- fits, inlined
        IF m = 0 AND NOT re THEN
            UPDATE {{schema}}.keys x SET counter = c.nt, token = c.nt, holder = o, since = t, expires = t + ttl * interval '1 microsecond',
                pending = NULL, note = NULL
            FROM (SELECT greatest(coalesce(y.counter, 0) + 1, (extract(epoch FROM t) * 1000000)::bigint) AS nt FROM {{schema}}.keys y WHERE y.key = k) c
            WHERE x.key = k RETURNING x.token INTO tok; -- grant_row, inlined
            RETURN;
        END IF;
        UPDATE {{schema}}.keys x SET counter = greatest(coalesce(x.counter, 0) + 1, (extract(epoch FROM t) * 1000000)::bigint)
        WHERE x.key = k RETURNING x.counter INTO tok; -- next_token3, inlined
        INSERT INTO {{schema}}.entries (key, owner, mode, lim, granted, token, expires, since, joined, holds)
        VALUES (k, o, m, lm, true, tok, t + ttl * interval '1 microsecond', t, t, CASE WHEN re THEN ARRAY[o] END);
        RETURN;
    END IF;
    IF q THEN
        INSERT INTO {{schema}}.entries (key, owner, mode, lim, expires, joined, chan)
        VALUES (k, o, m, lm, t + life * interval '1 microsecond', t, ch);
    END IF;
    SELECT coalesce(ceil(extract(epoch FROM least(  -- retry_ms3, inlined
        (SELECT min(x.expires) FROM {{schema}}.entries x WHERE x.key = k AND x.granted),
        (SELECT y.expires FROM {{schema}}.keys y WHERE y.key = k AND y.holder IS NOT NULL)) - t) * 1000)::bigint, 0) INTO retry;
    RETURN;
END $$;

-- lock3 is acquire3 for an exclusive grant of an owner that is not a
-- named one's hold, with a fast path for a free key: a key whose row
-- holds no live grant and that has no entry nor tombstone at all (n = 0,
-- counted first if unknown: since version 9, so that the driver's plain
-- fast Lock finds the key's next grants) is
-- granted by one UPDATE of its row (a HOT update). Otherwise it runs
-- acquire3 (which purges what expired). Since version 6 it checks the
-- session's settings (step_settings) and sets lock_timeout, so that the
-- driver may send it without its wrapper.
CREATE OR REPLACE FUNCTION {{schema}}.lock3(k text, o text, ttl bigint, q boolean, life bigint, ch text,
    OUT tok bigint, OUT retry bigint, OUT other_lim bigint, OUT voided boolean)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp SET lock_timeout = 0 AS $$
DECLARE
    t timestamptz;
    c bigint;
BEGIN
    PERFORM {{schema}}.step_settings();
    LOOP
        SELECT x.n INTO c FROM {{schema}}.keys x WHERE x.key = k FOR UPDATE;
        EXIT WHEN FOUND;
        INSERT INTO {{schema}}.keys (key) VALUES (k) ON CONFLICT (key) DO NOTHING;
    END LOOP;
    IF c IS NULL THEN -- count_n, inlined: see keys.n
        UPDATE {{schema}}.keys x SET n = (SELECT count(*) FROM {{schema}}.entries e WHERE e.key = k)
            + (SELECT count(*) FROM {{schema}}.voids v WHERE v.key = k)
        WHERE x.key = k;
    END IF;
    t := clock_timestamp();
    -- Under the row's lock, n is the key's entries and tombstones (see
    -- keys.n): none, and the key is free unless the row holds a live
    -- grant.
    UPDATE {{schema}}.keys x
    SET counter = greatest(coalesce(x.counter, 0) + 1, (extract(epoch FROM t) * 1000000)::bigint),
        token = greatest(coalesce(x.counter, 0) + 1, (extract(epoch FROM t) * 1000000)::bigint),
        holder = o, since = t, expires = t + ttl * interval '1 microsecond', pending = NULL, note = NULL
    WHERE x.key = k AND (x.holder IS NULL OR NOT x.expires > t) AND x.n = 0
    RETURNING x.token INTO tok;
    IF FOUND THEN
        retry := 0; other_lim := 0; voided := false;
        RETURN;
    END IF;
    SELECT a.tok, a.retry, a.other_lim, a.voided INTO tok, retry, other_lim, voided
    FROM {{schema}}.acquire3(k, o, 0, 0, ttl, false, q, life, ch) a;
END $$;

-- unlock3 is release3 of an owner that is not a named one's hold, not
-- leaving, with a fast path: o's live grant in k's row, no entry of k
-- (nobody to wake), is cleared by one UPDATE of the row. As lock3, it
-- checks the session's settings (version 6).
CREATE OR REPLACE FUNCTION {{schema}}.unlock3(k text, o text, ttl bigint) RETURNS boolean LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp SET lock_timeout = 0 AS $$
BEGIN
    PERFORM {{schema}}.step_settings();
    PERFORM 1 FROM {{schema}}.keys WHERE key = k FOR UPDATE;
    UPDATE {{schema}}.keys x SET holder = NULL, since = NULL, expires = NULL, pending = NULL, note = NULL
    WHERE x.key = k AND x.holder = o AND x.expires > clock_timestamp()
      AND NOT EXISTS (SELECT 1 FROM {{schema}}.entries e WHERE e.key = k);
    IF FOUND THEN
        RETURN true;
    END IF;
    RETURN {{schema}}.release3(k, o, false, ttl, false);
END $$;

-- check_turn3 is a queued waiter's step: it grants o when its turn has
-- come (again, extending it, if an earlier check granted it and its
-- reply was lost), and otherwise renews o's entry; an entry removed
-- behind the waiter's back joins again, at the end. An exclusive waiter
-- is granted in k's row (with its entry's note, version 7), and its
-- entry goes. As lock3, it checks the
-- session's settings (version 6).
CREATE OR REPLACE FUNCTION {{schema}}.check_turn3(k text, o text, m bigint, lm bigint, ttl bigint, life bigint, ch text,
    OUT tok bigint, OUT retry bigint, OUT other_lim bigint, OUT voided boolean)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp SET lock_timeout = 0 AS $$
DECLARE
    t  timestamptz;
    e  record;
    n  bigint;
    sh boolean;
    pm boolean;
BEGIN
    PERFORM {{schema}}.step_settings();
    t := {{schema}}.begin_key3(k);
    tok := 0; retry := 0; other_lim := 0; voided := false;
    IF EXISTS (SELECT 1 FROM {{schema}}.voids v WHERE v.key = k AND v.owner = o) THEN
        voided := true;
        RETURN;
    END IF;
    UPDATE {{schema}}.keys x SET pending = NULL, expires = CASE WHEN x.pending THEN t + ttl * interval '1 microsecond'
        ELSE greatest(x.expires, t + ttl * interval '1 microsecond') END
    WHERE x.key = k AND x.holder = o RETURNING x.token INTO tok;
    IF FOUND THEN
        RETURN;
    END IF;
    tok := 0;
    SELECT x.seq, x.granted, x.token, x.note INTO e FROM {{schema}}.entries x WHERE x.key = k AND x.owner = o;
    IF FOUND AND e.granted THEN
        UPDATE {{schema}}.entries x SET expires = greatest(x.expires, t + ttl * interval '1 microsecond')
        WHERE x.key = k AND x.owner = o;
        tok := e.token;
        RETURN;
    END IF;
    IF NOT FOUND THEN
        IF m = 2 THEN
            SELECT x.lim INTO other_lim FROM {{schema}}.entries x WHERE x.key = k AND x.lim > 0 AND x.lim <> lm LIMIT 1;
            IF FOUND THEN
                RETURN;
            END IF;
            other_lim := 0;
        END IF;
        INSERT INTO {{schema}}.entries AS x (key, owner, mode, lim, expires, joined, chan)
        VALUES (k, o, m, lm, t + life * interval '1 microsecond', t, ch)
        RETURNING x.seq, x.granted, x.token, x.note INTO e;
    END IF;
    SELECT count(*), coalesce(bool_and(x.mode = 1), true), coalesce(bool_and(x.mode = 2), true)
    INTO n, sh, pm FROM {{schema}}.entries x WHERE x.key = k AND x.seq < e.seq;
    IF EXISTS (SELECT 1 FROM {{schema}}.keys x WHERE x.key = k AND x.holder IS NOT NULL) THEN -- row_held, inlined
        n := n + 1; sh := false; pm := false;
    END IF;
    IF (m = 0 AND n = 0) OR (m = 1 AND sh) OR (m = 2 AND pm AND n < lm) THEN -- fits, inlined
        IF m = 0 THEN
            DELETE FROM {{schema}}.entries x WHERE x.key = k AND x.owner = o;
            UPDATE {{schema}}.keys x SET counter = c.nt, token = c.nt, holder = o, since = t, expires = t + ttl * interval '1 microsecond',
                pending = NULL, note = NULL
            FROM (SELECT greatest(coalesce(y.counter, 0) + 1, (extract(epoch FROM t) * 1000000)::bigint) AS nt FROM {{schema}}.keys y WHERE y.key = k) c
            WHERE x.key = k RETURNING x.token INTO tok; -- grant_row, inlined
            IF e.note IS NOT NULL THEN
                UPDATE {{schema}}.keys x SET note = e.note WHERE x.key = k;
            END IF;
            RETURN;
        END IF;
        UPDATE {{schema}}.keys x SET counter = greatest(coalesce(x.counter, 0) + 1, (extract(epoch FROM t) * 1000000)::bigint)
        WHERE x.key = k RETURNING x.counter INTO tok; -- next_token3, inlined
        UPDATE {{schema}}.entries x
        SET granted = true, token = tok, since = t, expires = t + ttl * interval '1 microsecond'
        WHERE x.key = k AND x.owner = o;
        RETURN;
    END IF;
    UPDATE {{schema}}.entries x SET expires = greatest(x.expires, t + life * interval '1 microsecond')
    WHERE x.key = k AND x.owner = o;
    SELECT coalesce(ceil(extract(epoch FROM least(  -- retry_ms3, inlined
        (SELECT min(x.expires) FROM {{schema}}.entries x WHERE x.key = k AND x.granted),
        (SELECT y.expires FROM {{schema}}.keys y WHERE y.key = k AND y.holder IS NOT NULL)) - t) * 1000)::bigint, 0) INTO retry;
    RETURN;
END $$;

-- hand3 hands k over, after a release, to its first waiter when that is
-- an exclusive one that waits and k is free: the waiter's entry goes,
-- k's row grants it (pending, until its entry's expiry, with k's next
-- token, and its entry's note) and it is notified. Its next step (check_turn3) finds the grant
-- and confirms it: the notification only wakes, as wake3's. It returns
-- false, changing nothing, when there is no such waiter.
CREATE OR REPLACE FUNCTION {{schema}}.hand3(k text, t timestamptz) RETURNS boolean LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    r record;
BEGIN
    IF EXISTS (SELECT 1 FROM {{schema}}.keys x WHERE x.key = k AND x.holder IS NOT NULL) THEN -- row_held, inlined
        RETURN false;
    END IF;
    SELECT e.owner, e.mode, e.granted, e.expires, e.chan, e.note INTO r FROM {{schema}}.entries e WHERE e.key = k ORDER BY e.seq LIMIT 1;
    IF NOT FOUND OR r.mode <> 0 OR r.granted OR NOT r.expires > t THEN
        RETURN false;
    END IF;
    DELETE FROM {{schema}}.entries e WHERE e.key = k AND e.owner = r.owner;
    UPDATE {{schema}}.keys x SET counter = c.tok, token = c.tok, holder = r.owner, since = t, expires = r.expires, pending = true,
        note = r.note
    FROM (SELECT greatest(coalesce(y.counter, 0) + 1, (extract(epoch FROM t) * 1000000)::bigint) AS tok FROM {{schema}}.keys y WHERE y.key = k) c
    WHERE x.key = k;
    IF r.chan <> '' THEN
        PERFORM pg_notify(r.chan, r.owner);
    END IF;
    RETURN true;
END $$;

-- release3 ends o's grant of k, in k's row or an entry, or o's entry
-- (re: o's hold of a named grant, and the grant with its last hold), and
-- wakes the waiters it lets in. It returns false, and voids o, when there
-- is none. leave: o's wait is over, and o is voided in any case (a queue
-- step of o's still on its way would otherwise join the queue again, or
-- be granted).
CREATE OR REPLACE FUNCTION {{schema}}.release3(k text, o text, re boolean, ttl bigint, leave boolean) RETURNS boolean LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    t timestamptz := {{schema}}.begin_key3(k);
    h text[];
BEGIN
    IF re THEN
        UPDATE {{schema}}.entries e SET holds = array_remove(e.holds, o)
        WHERE e.key = k AND e.granted AND o = ANY (e.holds)
        RETURNING e.holds INTO h;
        IF FOUND AND cardinality(h) = 0 THEN
            DELETE FROM {{schema}}.entries e WHERE e.key = k AND e.granted AND e.holds = '{}';
        END IF;
    ELSE
        UPDATE {{schema}}.keys x SET holder = NULL, since = NULL, expires = NULL, pending = NULL, note = NULL WHERE x.key = k AND x.holder = o;
        IF NOT FOUND THEN
            DELETE FROM {{schema}}.entries e WHERE e.key = k AND e.owner = o;
        END IF;
    END IF;
    IF NOT FOUND THEN
        PERFORM {{schema}}.void(k, o, t, ttl);
        RETURN false;
    END IF;
    IF leave THEN
        PERFORM {{schema}}.void(k, o, t, ttl);
    END IF;
    IF NOT {{schema}}.hand3(k, t) THEN
        PERFORM {{schema}}.wake3(k);
    END IF;
    RETURN true;
END $$;

-- refresh3 extends each grant of owners os at keys ks (pairwise) to at
-- least ttl µs from now, never shortening it, and returns the owners it
-- extended. Grants in keys rows: it locks those rows FOR NO KEY UPDATE,
-- which waits for a step (FOR UPDATE) and another batch, not for a
-- user's holds_grant (FOR KEY SHARE); a batch of several keys skips the
-- rows it would wait for, and the driver renews those one at a time.
-- Entries: it locks
-- the keys' rows FOR KEY SHARE, which excludes the steps but not
-- holds_grant nor other batches, then the entries it extends in (key,
-- owner) order (a named owner's grant may be in two batches). A step
-- locks one key's row, so nothing waits in a cycle.
CREATE OR REPLACE FUNCTION {{schema}}.refresh3(ks text[], os text[], ttl bigint) RETURNS SETOF text LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    t    timestamptz;
    rows text[];
BEGIN
    PERFORM {{schema}}.at_read_committed();
    IF cardinality(ks) = 1 THEN
        rows := ARRAY(SELECT x.key FROM {{schema}}.keys x WHERE x.key = ks[1] AND x.holder = os[1] FOR NO KEY UPDATE);
    ELSE
        rows := ARRAY(SELECT x.key FROM {{schema}}.keys x JOIN unnest(ks, os) AS u(k, o) ON x.key = u.k AND x.holder = u.o
                      ORDER BY x.key FOR NO KEY UPDATE OF x SKIP LOCKED);
    END IF;
    PERFORM 1 FROM {{schema}}.keys WHERE key = ANY (ks) ORDER BY key FOR KEY SHARE;
    PERFORM 1 FROM {{schema}}.entries e WHERE e.key = ANY (ks) AND e.granted
        AND (e.owner = ANY (os) OR e.holds && os) ORDER BY e.key, e.owner FOR UPDATE;
    t := clock_timestamp();
    RETURN QUERY
    WITH extended AS (
        UPDATE {{schema}}.keys x SET expires = greatest(x.expires, t + ttl * interval '1 microsecond')
        FROM unnest(ks, os) AS u(k, o)
        WHERE x.key = ANY (rows) AND x.key = u.k AND x.holder = u.o AND x.expires > t
        RETURNING x.holder
    )
    SELECT x.holder FROM extended x;
    -- Several holds of one named grant may be in the batch: the UPDATE
    -- extends the row once, and the join gives each of them.
    RETURN QUERY
    WITH extended AS (
        UPDATE {{schema}}.entries e SET expires = greatest(e.expires, t + ttl * interval '1 microsecond')
        FROM unnest(ks, os) AS u(k, o)
        WHERE e.key = u.k AND e.granted AND e.expires > t
          AND CASE WHEN e.holds IS NULL THEN e.owner = u.o ELSE u.o = ANY (e.holds) END
        RETURNING e.key, e.owner, e.holds
    )
    SELECT u.o FROM unnest(ks, os) AS u(k, o) JOIN extended x ON x.key = u.k
        AND CASE WHEN x.holds IS NULL THEN x.owner = u.o ELSE u.o = ANY (x.holds) END;
END $$;

-- resume3 extends o's grant of k to at least ttl µs from now if it has
-- mode m, lm permits, token tk and is a named owner's hold exactly when
-- re is set; it returns false, changing nothing, otherwise.
CREATE OR REPLACE FUNCTION {{schema}}.resume3(k text, o text, m bigint, lm bigint, tk bigint, re boolean, ttl bigint)
RETURNS boolean LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    t timestamptz := {{schema}}.begin_key3(k);
BEGIN
    IF m = 0 AND lm = 0 AND NOT re THEN
        UPDATE {{schema}}.keys x SET expires = greatest(x.expires, t + ttl * interval '1 microsecond')
        WHERE x.key = k AND x.holder = o AND x.token = tk;
        IF FOUND THEN
            RETURN true;
        END IF;
    END IF;
    UPDATE {{schema}}.entries e SET expires = greatest(e.expires, t + ttl * interval '1 microsecond')
    WHERE e.key = k AND e.granted AND e.token = tk AND e.mode = m AND e.lim = lm
      AND (e.holds IS NOT NULL) = re
      AND CASE WHEN e.holds IS NULL THEN e.owner = o ELSE o = ANY (e.holds) END;
    RETURN FOUND;
END $$;

-- holds_grant is the check a user's own transaction makes before it
-- writes what the lease of k with fencing token tk guards: true while
-- that grant (in k's row or an entry) is live and still the key's (see
-- the package doc). It locks k's row FOR KEY SHARE, so no step on k
-- (each locks the row FOR UPDATE first) changes the grants until the
-- user's transaction ends, while renewals (FOR KEY SHARE, and FOR NO KEY
-- UPDATE of the row's grant) go on: the holder's lease is not lost to
-- the user's transaction that checks it.
CREATE OR REPLACE FUNCTION {{schema}}.holds_grant(k text, tk bigint) RETURNS boolean LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    t timestamptz;
BEGIN
    PERFORM 1 FROM {{schema}}.keys WHERE key = k FOR KEY SHARE;
    IF NOT FOUND THEN
        RETURN false; -- no row, no lock: and no grant is made without the row
    END IF;
    t := clock_timestamp();
    RETURN EXISTS (SELECT 1 FROM {{schema}}.keys x
                   WHERE x.key = k AND x.holder IS NOT NULL AND x.token = tk AND x.expires > t)
        OR EXISTS (SELECT 1 FROM {{schema}}.entries e
                   WHERE e.key = k AND e.granted AND e.token = tk AND e.expires > t);
END $$;

-- sweep3 deletes what keys used once leave behind, for at most lim keys
-- whose counter is more than keep µs behind the clock and that no live
-- grant, entry or tombstone depends on: their expired entries and
-- tombstones, then their row (and its expired grant). Tokens never go
-- back (the next one is the clock in µs, above a counter that far
-- behind). It skips rows that a step (FOR UPDATE), a refresh (FOR KEY
-- SHARE, FOR NO KEY UPDATE) or a user's holds_grant transaction (FOR
-- KEY SHARE) has locked, and never waits for a key's row. It returns how
-- many rows it deleted.
CREATE OR REPLACE FUNCTION {{schema}}.sweep3(lim bigint, keep bigint) RETURNS bigint LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    t   timestamptz := clock_timestamp();
    cut bigint      := (extract(epoch FROM t) * 1000000)::bigint - keep;
    k   text;
    n   bigint      := 0;
    m   bigint;
BEGIN
    PERFORM {{schema}}.at_read_committed();
    FOR k IN SELECT x.key FROM {{schema}}.keys x
             WHERE coalesce(x.counter, 0) < cut AND (x.holder IS NULL OR x.expires <= t)
               AND NOT EXISTS (SELECT 1 FROM {{schema}}.entries e WHERE e.key = x.key AND e.expires > t)
               AND NOT EXISTS (SELECT 1 FROM {{schema}}.voids v WHERE v.key = x.key AND v.expires > t)
             LIMIT lim FOR UPDATE SKIP LOCKED LOOP
        t := clock_timestamp();
        DELETE FROM {{schema}}.entries e WHERE e.key = k AND e.expires <= t;
        GET DIAGNOSTICS m = ROW_COUNT;
        n := n + m;
        DELETE FROM {{schema}}.voids v WHERE v.key = k AND v.expires <= t;
        GET DIAGNOSTICS m = ROW_COUNT;
        n := n + m;
        -- Under the row's lock no step adds to the key: what is left is
        -- live, and keeps the row.
        DELETE FROM {{schema}}.keys x WHERE x.key = k AND (x.holder IS NULL OR x.expires <= t)
            AND NOT EXISTS (SELECT 1 FROM {{schema}}.entries e WHERE e.key = k)
            AND NOT EXISTS (SELECT 1 FROM {{schema}}.voids v WHERE v.key = k);
        GET DIAGNOSTICS m = ROW_COUNT;
        n := n + m;
    END LOOP;
    RETURN n;
END $$;

-- version says which version of this script made the schema.
CREATE OR REPLACE FUNCTION {{schema}}.version() RETURNS integer LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT 9 $$;
