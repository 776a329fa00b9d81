package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/jackc/pgx/v5"
)

// PostgresUser and PostgresPassword are the role the Lockers of the
// scenarios and of the nemesis log in as on a server from StartServer: no
// superuser, allowed to create schemas in the database (a Locker's first
// call creates the driver's). Its password is fixed, so that holder
// processes started apart know it.
const (
	PostgresUser     = "dlock_app"
	PostgresPassword = "dlock-app-secret"
)

// PostgresURLFormat is the postgres:// URL of the driver (lock.Open) as
// PostgresUser, with %s for the address (a server's or a proxy's).
const PostgresURLFormat = "postgres://" + PostgresUser + ":" + PostgresPassword + "@%s/postgres?sslmode=disable"

// PostgresURL is PostgresURLFormat for addr, with query (a "k=v&..."
// string, or "") added.
func PostgresURL(addr, query string) string {
	u := fmt.Sprintf(PostgresURLFormat, addr)
	if query != "" {
		u += "&" + query
	}
	return u
}

func createPostgresUser(p *testserver.Postgres) error {
	if _, err := p.CreateUser(PostgresUser, PostgresPassword); err != nil {
		return err
	}
	_, err := p.Exec("GRANT CREATE ON DATABASE " + testserver.QuoteIdent(p.Database) + " TO " + PostgresUser + ";")
	return err
}

// PostgresResidue lists the grants and queue entries still live on a
// PostgreSQL server (superuserURL: a role that can read every schema), in
// every schema laid out as the postgres driver's (tables keys, entries and
// voids): an entry, granted or waiting, or a grant in a key's row, whose
// expiry is still ahead.
// Expired entries are gone as far as every step is concerned (the next
// step on the key deletes them), tombstones (voids) expire, and the keys'
// rows are fencing counters, which must stay.
func PostgresResidue(ctx context.Context, superuserURL string) ([]string, error) {
	conn, err := pgx.Connect(ctx, superuserURL)
	if err != nil {
		return nil, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn.Close(cctx)
		cancel()
	}()
	rows, err := conn.Query(ctx, `SELECT table_schema FROM information_schema.tables WHERE table_name = 'entries'
		AND table_schema IN (SELECT table_schema FROM information_schema.tables WHERE table_name = 'voids')
		AND table_schema IN (SELECT table_schema FROM information_schema.tables WHERE table_name = 'keys')
		ORDER BY 1`)
	if err != nil {
		return nil, fmt.Errorf("postgres residue: schemas: %w", err)
	}
	schemas, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("postgres residue: schemas: %w", err)
	}
	var out []string
	for _, s := range schemas {
		rows, err := conn.Query(ctx, `SELECT e.key, e.owner, e.granted, e.mode, e.token, extract(epoch FROM e.expires - clock_timestamp())::float8
			FROM `+pgx.Identifier{s}.Sanitize()+`.entries e WHERE e.expires > clock_timestamp() ORDER BY e.key, e.seq`)
		if err != nil {
			return out, fmt.Errorf("postgres residue: %s.entries: %w", s, err)
		}
		for rows.Next() {
			var key, owner string
			var granted bool
			var mode int16
			var token int64
			var left float64
			if err := rows.Scan(&key, &owner, &granted, &mode, &token, &left); err != nil {
				rows.Close()
				return out, err
			}
			what := "waiter"
			if granted {
				what = fmt.Sprintf("grant (token %d)", token)
			}
			out = append(out, fmt.Sprintf("%s.entries: %s of key %q, mode %d, owner %s, expiring in %v", s, what, key, mode, owner,
				time.Duration(left*float64(time.Second)).Round(time.Millisecond)))
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return out, err
		}
		held, err := pgRowGrants(ctx, conn, s)
		out = append(out, held...)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// pgRowGrants lists the live grants kept in the keys rows of schema s
// (the driver's schema version 3 and later; none before).
func pgRowGrants(ctx context.Context, conn *pgx.Conn, s string) ([]string, error) {
	var has bool
	err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'keys' AND column_name = 'holder')`, s).Scan(&has)
	if err != nil || !has {
		return nil, err
	}
	rows, err := conn.Query(ctx, `SELECT x.key, x.holder, x.token, extract(epoch FROM x.expires - clock_timestamp())::float8
		FROM `+pgx.Identifier{s}.Sanitize()+`.keys x WHERE x.holder IS NOT NULL AND x.expires > clock_timestamp() ORDER BY x.key`)
	if err != nil {
		return nil, fmt.Errorf("postgres residue: %s.keys: %w", s, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var key, owner string
		var token int64
		var left float64
		if err := rows.Scan(&key, &owner, &token, &left); err != nil {
			return out, err
		}
		out = append(out, fmt.Sprintf("%s.keys: grant (token %d) of key %q, owner %s, expiring in %v", s, token, key, owner,
			time.Duration(left*float64(time.Second)).Round(time.Millisecond)))
	}
	return out, rows.Err()
}
