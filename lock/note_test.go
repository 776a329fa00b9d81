package lock_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/driver/memory"
	"github.com/dlock-go/dlock/lock"
)

// A note is stored with the grant and shown by Inspect while the grant
// lives; bad notes fail with ErrInvalid, and a driver without notes
// refuses them with its reason, before any I/O.
func TestWithNote(t *testing.T) {
	ctx := context.Background()
	lk := memory.New(memory.NewStore(), nil)
	defer lk.Close()
	if err := lk.Supports(lock.Notes); err != nil {
		t.Fatalf("memory Supports(Notes): %v", err)
	}
	l, err := lk.TryLock(ctx, "k", lock.WithNote("host-a:8080"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := lk.Inspect(ctx, "k")
	if err != nil || len(st.Holders) != 1 || st.Holders[0].Note != "host-a:8080" {
		t.Fatalf("Inspect: %+v, %v; want one holder with the note", st, err)
	}
	if _, err := lk.Resume(ctx, l.Handle(), lock.WithNote("x")); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("Resume with a note: %v; want ErrInvalid", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{strings.Repeat("n", lock.MaxNoteLen+1), "bad\xff", "two\nlines"} {
		if _, err := lk.TryLock(ctx, "k", lock.WithNote(bad)); !errors.Is(err, lock.ErrInvalid) {
			t.Errorf("TryLock with note %.20q: %v; want ErrInvalid", bad, err)
		}
	}
	if l, err := lk.TryLock(ctx, "k", lock.WithNote(strings.Repeat("é", lock.MaxNoteLen/2))); err != nil {
		t.Errorf("a note of MaxNoteLen bytes: %v", err)
	} else {
		l.Unlock(ctx)
	}

	f := newFake()
	plain := lock.New(f, nil)
	defer plain.Close()
	if err := plain.Supports(lock.Notes); !errors.Is(err, lock.ErrUnsupported) {
		t.Errorf("Supports(Notes) of a driver that declares none: %v", err)
	}
	if _, err := plain.TryLock(ctx, "k", lock.WithNote("n")); !errors.Is(err, lock.ErrUnsupported) {
		t.Errorf("TryLock with a note on a driver without notes: %v; want ErrUnsupported", err)
	}
	if n := f.acquires.Load(); n != 0 {
		t.Errorf("the refused call reached the driver %d times", n)
	}
}
