package postgres

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errtext"
	"github.com/dlock-go/dlock/internal/redact"
	"github.com/dlock-go/dlock/internal/tlsconf"
	"github.com/dlock-go/dlock/lock"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Scheme is the URL scheme this package registers with lock.Open; the
// scheme "postgresql" is the same.
const Scheme = "postgres"

func init() {
	lock.Register(Scheme, open)
	lock.Register("postgresql", open)
}

// dlock's own URL parameters; every other one is pgx's (see the package
// doc).
var ownParams = append([]string{"ttl", "autorenew", "schema", "create_schema", "pooling"}, tlsconf.Params...)

// open is the OpenFunc for postgres://user:password@host:port/db?params:
// dlock's parameters are taken out, and the rest of the URL is pgx's
// connection string. It makes no connection: the pool connects on the
// first call.
func open(ctx context.Context, u *url.URL) (driver.Driver, *lock.Options, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: postgres URL %s: %s", lock.ErrInvalid, errtext.Quote(redact.URL(u)), fmt.Sprintf(format, args...))
	}
	if u.Opaque != "" {
		return nil, nil, bad("want postgres://[user[:password]@]host[:port][/database][?parameters]")
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, nil, bad("query: %s", errtext.Bound(err.Error()))
	}
	own, pgxq := url.Values{}, url.Values{}
	for name, vals := range q {
		if slices.Contains(ownParams, name) {
			own[name] = vals
		} else {
			pgxq[name] = vals
		}
	}
	ownURL := *u
	ownURL.RawQuery = own.Encode()
	lo, params, err := lock.URLOptions(&ownURL, ownParams[2:]...)
	if err != nil {
		return nil, nil, err
	}
	o := &Options{Options: *lo, Schema: params.Get("schema")}
	if params.Has("schema") && o.Schema == "" {
		return nil, nil, bad("empty schema")
	}
	if v := params.Get("create_schema"); params.Has("create_schema") {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, nil, bad("create_schema=%s: want true or false", errtext.Quote(v))
		}
		o.NoCreate = !b
	}
	switch v := params.Get("pooling"); v {
	case "transaction":
		o.TransactionPooling = true
	case "", "session":
		if params.Has("pooling") && v == "" {
			return nil, nil, bad("empty pooling: want session or transaction")
		}
	default:
		return nil, nil, bad("pooling=%s: want session or transaction (PgBouncer's pool_mode)", errtext.Quote(v))
	}
	tc, err := tlsconf.Parse(params, fmt.Sprintf("postgres URL %s", errtext.Quote(redact.URL(u))))
	if err != nil {
		return nil, nil, err
	}
	pgxURL := *u
	pgxURL.Scheme = "postgres"
	// A space as %20: pgx (v5.11 and later, as libpq) reads "+" in a
	// query value as a plus sign. Encode writes a plus sign as %2B, so
	// every "+" it writes is a space.
	pgxURL.RawQuery = strings.ReplaceAll(pgxq.Encode(), "+", "%20")
	cfg, err := pgxpool.ParseConfig(pgxURL.String())
	if err != nil {
		return nil, nil, bad("%s", errtext.Bound(scrub(err.Error(), pgxURL.String())))
	}
	if tc != nil {
		if tc.ServerName == "" {
			tc.ServerName = cfg.ConnConfig.Host
		}
		cfg.ConnConfig.TLSConfig = tc
		cfg.ConnConfig.Fallbacks = nil
	}
	cfg.BeforeClose = closeDrained
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, bad("%s", errtext.Bound(scrub(err.Error(), pgxURL.String())))
	}
	d, lo := newDriver(pool, o, true)
	return d, lo, nil
}

// closeDrained closes the socket of a connection the pool destroys after
// pgx closed it (a query or the pool's own ping ended by its context, a
// failed read): pgx (v5.11 and later) drains such a socket for up to 15 s
// and the pool's slot stays taken until it is closed (see dropIfEnded).
// The pool destroys a connection no call holds; one pgx did not close is
// closed as usual.
func closeDrained(c *pgx.Conn) {
	if c.IsClosed() {
		c.PgConn().Conn().Close()
	}
}

// scrub hides raw's secrets in text: pgx's messages quote the connection
// string with only the user information's password masked, and a
// password= parameter (or any other secret one) would show.
func scrub(text, raw string) string { return redact.Scrub(text, raw) }
