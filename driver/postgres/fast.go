package postgres

// The fast paths: plain statements (no PL/pgSQL) for an exclusive Lock
// of a free key and the Unlock of a grant nobody waits behind, the
// common uncontended case. Each is one step (see run): the statements
// below between the step's settings and its COMMIT. The first locks the
// key's row FOR UPDATE, as begin_key3 does, so that the next statement's
// snapshot, taken after that wait, sees every step it waited for (a
// single UPDATE's subqueries would read a snapshot taken before it). The
// clock is read once, after the lock. Where the fast path does not apply
// (the row holds a live grant, or an entry of the key is live, or the
// owner is voided; for Unlock, the grant is not o's, or someone waits),
// the same statement calls the function that does the whole step, in the
// same transaction, and nothing the fast path did is kept but the row.
//
// Lock (acquire3's grant in the key's row, for m = 0 and not re):
//
//	INSERT INTO s.keys (key) VALUES ($1) ON CONFLICT (key) DO NOTHING;
//	SELECT FROM s.keys WHERE key = $1 FOR UPDATE;
//	DELETE the expired entries of $1 if none is live (with a live one the
//	       fast path does not apply, and acquire3 purges them and wakes
//	       the waiters that lets in);
//	WITH g AS (UPDATE s.keys x SET counter = tok, token = tok, holder = $2, since = t, expires = t + ttl
//	           FROM clock t, next token tok
//	           WHERE x.key = $1 AND (x.holder IS NULL OR NOT x.expires > t)
//	             AND no entry of $1 expires after t AND no tombstone of ($1, $2) does
//	           RETURNING x.token)
//	SELECT token, 0, 0, false FROM g
//	UNION ALL SELECT * FROM s.acquire3(...) WHERE NOT EXISTS (SELECT FROM g)
//
// Unlock (release3 of o's grant in the row with no live entry behind it):
//
//	SELECT FROM s.keys WHERE key = $1 FOR UPDATE;
//	WITH r AS (UPDATE s.keys x SET holder = NULL, since = NULL, expires = NULL
//	           WHERE x.key = $1 AND x.holder = $2 AND x.expires > t AND no entry of $1 expires after t
//	           RETURNING true)
//	SELECT true FROM r UNION ALL SELECT s.release3(...) WHERE NOT EXISTS (SELECT FROM r)
//
// The statements name the schema's objects; operators and functions
// resolve to pg_catalog's, the step's search path (see run).
func fastAcquire(s string) string {
	return "INSERT INTO " + s + ".keys (key) VALUES ($1) ON CONFLICT (key) DO NOTHING; " +
		"SELECT FROM " + s + ".keys WHERE key = $1 FOR UPDATE; " +
		"DELETE FROM " + s + ".entries e WHERE e.key = $1 AND NOT e.expires > clock_timestamp()" +
		" AND NOT EXISTS (SELECT FROM " + s + ".entries f WHERE f.key = $1 AND f.expires > clock_timestamp()); " +
		"WITH c AS (SELECT clock_timestamp() AS t), " +
		"g AS (UPDATE " + s + ".keys x SET counter = n.tok, token = n.tok, holder = $2, since = c.t," +
		" expires = c.t + $5 * interval '1 microsecond'" +
		" FROM c, LATERAL (SELECT greatest(coalesce(y.counter, 0) + 1, (extract(epoch FROM c.t) * 1000000)::bigint) AS tok" +
		" FROM " + s + ".keys y WHERE y.key = $1) n" +
		" WHERE x.key = $1 AND (x.holder IS NULL OR NOT x.expires > c.t)" +
		" AND NOT EXISTS (SELECT FROM " + s + ".entries e WHERE e.key = $1 AND e.expires > c.t)" +
		" AND NOT EXISTS (SELECT FROM " + s + ".voids v WHERE v.key = $1 AND v.owner = $2 AND v.expires > c.t)" +
		" RETURNING x.token) " +
		"SELECT token, 0::bigint, 0::bigint, false FROM g UNION ALL " +
		"SELECT tok, retry, other_lim, voided FROM " + s + ".acquire3($1, $2, $3, $4, $5, $6, $7, $8, $9) WHERE NOT EXISTS (SELECT FROM g)"
}

func fastRelease(s string) string {
	return "SELECT FROM " + s + ".keys WHERE key = $1 FOR UPDATE; " +
		"WITH c AS (SELECT clock_timestamp() AS t), " +
		"r AS (UPDATE " + s + ".keys x SET holder = NULL, since = NULL, expires = NULL FROM c" +
		" WHERE x.key = $1 AND x.holder = $2 AND x.expires > c.t" +
		" AND NOT EXISTS (SELECT FROM " + s + ".entries e WHERE e.key = $1 AND e.expires > c.t)" +
		" RETURNING true AS ok) " +
		"SELECT ok FROM r UNION ALL SELECT " + s + ".release3($1, $2, $3, $4, $5) WHERE NOT EXISTS (SELECT FROM r)"
}
