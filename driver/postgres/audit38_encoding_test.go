package postgres

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
)

// audit38SJISKey is a key (valid UTF-8) that ends its literal early
// when a step's query is read in client_encoding SJIS: "Õ" is the bytes
// C3 95, and SJIS reads 95 with the backslash after it as one character
// (表), so of the two backslashes the escaping wrote one is left, and
// it escapes the first of the two quotes; the second one closes the
// literal. What follows is SQL: the rest of acquire's arguments, then a
// statement that deletes every entry of every key and commits it.
const audit38SJISKey = "Õ\\', current_user, 0, 0, 1000000, false, false, 1); DELETE FROM dlock.entries; COMMIT; --"

// TestAudit38ClientEncodingInjection: a step's arguments are literals in
// its query text, escaped byte by byte as UTF-8. A connection whose
// client_encoding is one where a backslash byte can end a multibyte
// character (SJIS, BIG5, GBK, UHC, GB18030: a database's or role's
// default, or client_encoding= in the URL; pgx itself refuses its own
// simple-protocol queries there, but the driver sends its steps with
// pgconn) reads the literal otherwise. With backslash_quote on (a
// database default some legacy applications need; the default,
// safe_encoding, refuses \' there) a key is SQL run with the
// application's rights: here it deletes every grant, and another client
// takes a key that is held. The driver must refuse such a connection,
// or send the key so that it cannot end its literal.
func TestAudit38ClientEncodingInjection(t *testing.T) {
	url := envDB(t, "audit38_sjis", "client_encoding=SJIS", "backslash_quote=on")
	b := testserver.StartPgBouncer(t, testserver.SharedPostgres(t), "transaction")
	t.Run("Direct", func(t *testing.T) { encodingInjection(t, url, Options{}) })
	t.Run("PgBouncer", func(t *testing.T) {
		encodingInjection(t, testserver.DatabaseURL(b.URL(), "audit38_sjis"), Options{TransactionPooling: true})
	})
}

func encodingInjection(t *testing.T, url string, o Options) {
	raw := rawPool(t, url)
	ctx := tctx(t, 60*time.Second)
	var enc string
	if err := raw.QueryRow(ctx, "SHOW client_encoding").Scan(&enc); err != nil || enc != "SJIS" {
		t.Fatalf("client_encoding of the test's database: %q, %v; want SJIS (the test would prove nothing)", enc, err)
	}
	a := newLockerWith(t, url, &o, &netCut{})
	b := newLockerWith(t, url, &o, &netCut{})
	victim := auditKey("audit38-victim")
	held, err := a.TryLock(ctx, victim, lock.WithTTL(30*time.Second))
	if err != nil {
		// Refusing the connection is right, if it says why.
		if !strings.Contains(err.Error(), "client_encoding") {
			t.Fatalf("TryLock over a connection in SJIS: %v; want a grant, or an error that names client_encoding", err)
		}
		t.Logf("refused: %v", err)
		return
	}
	defer held.Unlock(ctx)
	if _, err := b.TryLock(ctx, audit38SJISKey, lock.WithTTL(30*time.Second)); err != nil {
		t.Logf("TryLock of the crafted key: %v", err)
	}
	var n int
	if err := raw.QueryRow(ctx, "SELECT count(*) FROM dlock.keys WHERE key = $1 AND holder IS NOT NULL", victim).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("the crafted key's step deleted the grant of another key: %d grants of %q left, want 1", n, victim)
	}
	if other, err := b.TryLock(ctx, victim); err == nil {
		defer other.Unlock(ctx)
		t.Errorf("two holders of %q: tokens %d and %d", victim, held.Token(), other.Token())
	} else if !errors.Is(err, lock.ErrNotAcquired) {
		t.Errorf("TryLock of a held key: %v, want ErrNotAcquired", err)
	}
}
