package postgres

import (
	"context"
	_ "embed"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
	"github.com/jackc/pgx/v5/pgxpool"
)

// schemaV6 is schema.sql of version 6, the last one without notes.
//
//go:embed testdata/schema_v6.sql
var schemaV6 string

// v6Lock and v6Unlock are a version 6 client's fast steps (lock3 and
// unlock3 as it prepares them), of schema s.
func v6Lock(t *testing.T, raw *pgxpool.Pool, s, key, owner string) int64 {
	t.Helper()
	var tok, retry, lim int64
	var voided bool
	err := raw.QueryRow(context.Background(), "SELECT tok, retry, other_lim, voided FROM "+s+".step_settings(), "+s+".lock3($1, $2, $3, $4, $5, $6)",
		key, owner, int64(30_000_000), false, int64(3_000_000), "").Scan(&tok, &retry, &lim, &voided)
	if err != nil {
		t.Fatalf("a version 6 lock3: %v", err)
	}
	return tok
}

func v6Unlock(t *testing.T, raw *pgxpool.Pool, s, key, owner string) bool {
	t.Helper()
	var ok bool
	if err := raw.QueryRow(context.Background(), "SELECT "+s+".unlock3($1, $2, $3) FROM "+s+".step_settings()", key, owner, int64(30_000_000)).Scan(&ok); err != nil {
		t.Fatalf("a version 6 unlock3: %v", err)
	}
	return ok
}

// holderNotes are the owner and note of each holder of key, as Inspect
// reports them ("owner=note").
func holderNotes(t *testing.T, l *lock.Locker, key string) []string {
	t.Helper()
	st, err := l.Inspect(tctx(t, 10*time.Second), key)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, h := range st.Holders {
		out = append(out, h.Owner+"="+h.Note)
	}
	return out
}

// TestNoteHandedOver: a queued waiter's note goes with the key when a
// release hands it over (hand3), before the waiter's own step confirms
// it; a note is the grant's alone: the next grant of the key (a
// TryLock without a note, or a version 6 client's step after a noted
// grant expired) shows none.
func TestNoteHandedOver(t *testing.T) {
	url := serverURL(t)
	raw := rawPool(t, url)
	a, _ := driverLocker(t, url, nil)
	// Polls every heartbeat (no LISTEN): the hand-over stands unconfirmed
	// for up to a second.
	w, _ := driverLocker(t, url, &Options{TransactionPooling: true})
	ctx := tctx(t, 30*time.Second)
	k := auditKey("note-hand")
	first, err := a.Lock(ctx, k, lock.WithNote("first"))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *lock.Lease, 1)
	go func() {
		l, err := w.Lock(ctx, k, lock.WithNote("second ✓"))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitFor(t, "the waiter's entry", 10*time.Second, func() bool {
		var n int
		raw.QueryRow(ctx, "SELECT count(*) FROM dlock.entries WHERE key = $1 AND note = 'second ✓'", k).Scan(&n)
		return n == 1
	})
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	var pending bool
	var note *string
	if err := raw.QueryRow(ctx, "SELECT coalesce(pending, false), note FROM dlock.keys WHERE key = $1", k).Scan(&pending, &note); err != nil {
		t.Fatal(err)
	}
	if !pending {
		t.Log("the waiter confirmed its grant before the row was read: the hand-over's note is not tested alone this run")
	}
	if note == nil || *note != "second ✓" {
		t.Errorf("the row after the hand-over has note %v (pending %v), want the waiter's", note, pending)
	}
	second := <-got
	if second == nil {
		return
	}
	if notes := holderNotes(t, a, k); len(notes) != 1 || !strings.HasSuffix(notes[0], "=second ✓") {
		t.Errorf("Inspect after the hand-over: %q, want the waiter with its note", notes)
	}
	if err := second.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	plain, err := a.TryLock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if notes := holderNotes(t, a, k); len(notes) != 1 || !strings.HasSuffix(notes[0], "=") {
		t.Errorf("a grant without a note after noted ones: Inspect %q, want no note", notes)
	}
	plain.Unlock(ctx)

	// A noted grant that expires, then a version 6 client's grant (its
	// steps call the same functions, and store no note).
	short, err := a.TryLock(ctx, k, lock.WithNote("gone"), lock.WithTTL(200*time.Millisecond), lock.WithDisableAutoRenew(true))
	if err != nil {
		t.Fatal(err)
	}
	_ = short
	time.Sleep(300 * time.Millisecond)
	owner := strings.Repeat("6", 32)
	if tok := v6Lock(t, raw, "dlock", k, owner); tok == 0 {
		t.Fatal("the version 6 client was not granted a key whose noted grant expired")
	}
	if notes := holderNotes(t, a, k); len(notes) != 1 || notes[0] != owner+"=" {
		t.Errorf("a version 6 grant after a noted one expired: Inspect %q, want %s without a note", notes, owner)
	}
	if !v6Unlock(t, raw, "dlock", k, owner) {
		t.Error("the version 6 client's release found nothing")
	}
}

// TestNoteCheckTurnCarries: a waiter's turn (check_turn3, as a version
// 6 client sends it: no note of its own) grants the row with the note of
// the waiter's entry.
func TestNoteCheckTurnCarries(t *testing.T) {
	url := serverURL(t)
	raw := rawPool(t, url)
	l, _ := driverLocker(t, url, nil)
	ctx := tctx(t, 30*time.Second)
	cycle(t, l, auditKey("note-turn-install")) // the schema is there
	k, o := auditKey("note-turn"), strings.Repeat("c", 32)
	if _, err := raw.Exec(ctx, "INSERT INTO dlock.keys (key) VALUES ($1)", k); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(ctx, "INSERT INTO dlock.entries (key, owner, mode, expires, joined, note) VALUES ($1, $2, 0, clock_timestamp() + interval '1 minute', clock_timestamp(), 'waited')", k, o); err != nil {
		t.Fatal(err)
	}
	var tok int64
	if err := raw.QueryRow(ctx, "SELECT tok FROM dlock.step_settings(), dlock.check_turn3($1, $2, 0, 0, 30000000, 3000000, '')", k, o).Scan(&tok); err != nil || tok == 0 {
		t.Fatalf("check_turn3 of the first waiter: token %d, %v", tok, err)
	}
	if notes := holderNotes(t, l, k); len(notes) != 1 || notes[0] != o+"=waited" {
		t.Errorf("the waiter's turn: Inspect %q, want %s with its entry's note", notes, o)
	}
	if !v6Unlock(t, raw, "dlock", k, o) {
		t.Error("release found nothing")
	}
	var note *string
	if err := raw.QueryRow(ctx, "SELECT note FROM dlock.keys WHERE key = $1", k).Scan(&note); err != nil || note != nil {
		t.Errorf("the row's note after the release: %v, %v; want none", note, err)
	}
}

// TestUpgradeFromV6: a version 6 client holds a key when a version 7
// client installs its schema over it (its ALTER TABLE adds the note
// columns): the grant stands, the version 7 client is refused the key
// and takes others with notes, and the version 6 client's steps (which
// read version() 7 and install nothing) keep working there, with no
// notes, and are refused a key a noted grant holds.
func TestUpgradeFromV6(t *testing.T) {
	ctx := tctx(t, time.Minute)
	url := serverURL(t)
	raw := rawPool(t, url)
	const schema = "upgrade_v6"
	if _, err := raw.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(ctx, strings.ReplaceAll(schemaV6, "{{schema}}", schema)); err != nil {
		t.Fatal(err)
	}
	key, owner := auditKey("upgrade6"), strings.Repeat("6", 32)
	tok := v6Lock(t, raw, schema, key, owner)
	if tok == 0 {
		t.Fatal("the version 6 grant")
	}
	l7, _ := driverLocker(t, url, &Options{Schema: schema})
	if ls, err := l7.TryLock(ctx, key, lock.WithNote("n")); !errors.Is(err, lock.ErrHeld) {
		if ls != nil {
			ls.Unlock(ctx)
		}
		t.Fatalf("a version 7 TryLock of a key a version 6 client holds: %v, want ErrHeld", err)
	}
	var v int
	if err := raw.QueryRow(ctx, "SELECT "+schema+".version()").Scan(&v); err != nil || v != schemaVersion {
		t.Fatalf("version() %d, %v; want %d", v, err, schemaVersion)
	}
	if notes := holderNotes(t, l7, key); len(notes) != 1 || notes[0] != owner+"=" {
		t.Errorf("Inspect of the version 6 grant: %q, want %s without a note", notes, owner)
	}
	other := auditKey("upgrade6-other")
	noted, err := l7.TryLock(ctx, other, lock.WithNote("seven"))
	if err != nil {
		t.Fatal(err)
	}
	if notes := holderNotes(t, l7, other); len(notes) != 1 || !strings.HasSuffix(notes[0], "=seven") {
		t.Errorf("a version 7 noted grant: Inspect %q", notes)
	}
	if tok := v6Lock(t, raw, schema, other, strings.Repeat("7", 32)); tok != 0 {
		t.Errorf("a version 6 client was granted a key a version 7 noted grant holds (token %d)", tok)
	}
	if !v6Unlock(t, raw, schema, key, owner) {
		t.Error("the version 6 client's release of its grant found nothing")
	}
	if err := noted.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if tok := v6Lock(t, raw, schema, other, strings.Repeat("8", 32)); tok == 0 {
		t.Error("a version 6 client was refused a key freed by a noted grant's release")
	} else if notes := holderNotes(t, l7, other); len(notes) != 1 || notes[0] != strings.Repeat("8", 32)+"=" {
		t.Errorf("the version 6 grant after a noted one: Inspect %q, want no note", notes)
	}
}

// Inspect by a client of this version, before any of its steps installed
// this version, of a key a version 6 client holds: it must not report the
// key free (it fails, saying the schema is older), and after an install
// it shows the holder.
func TestInspectOlderSchema(t *testing.T) {
	ctx := tctx(t, time.Minute)
	url := serverURL(t)
	raw := rawPool(t, url)
	const schema = "inspect_v6"
	if _, err := raw.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(ctx, strings.ReplaceAll(schemaV6, "{{schema}}", schema)); err != nil {
		t.Fatal(err)
	}
	key, owner := auditKey("inspect6"), strings.Repeat("6", 32)
	if v6Lock(t, raw, schema, key, owner) == 0 {
		t.Fatal("the version 6 grant")
	}
	l7, _ := driverLocker(t, url, &Options{Schema: schema})
	st, err := l7.Inspect(ctx, key)
	switch {
	case err == nil && !st.Held():
		t.Fatal("Inspect on a version 6 schema reports a key a version 6 client holds free")
	case err != nil && !strings.Contains(err.Error(), "older"):
		t.Errorf("Inspect on a version 6 schema: %v, want an error saying the schema is older", err)
	}
	if _, err := l7.TryLock(ctx, auditKey("inspect6-other")); err != nil {
		t.Fatal(err) // installs this version
	}
	if notes := holderNotes(t, l7, key); len(notes) != 1 || notes[0] != owner+"=" {
		t.Errorf("Inspect after the install: %q, want the version 6 holder", notes)
	}
}
