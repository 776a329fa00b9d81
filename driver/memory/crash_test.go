package memory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver/memory"
	"github.com/dlock-go/dlock/lock"
)

// TestCrash: a crashed Locker's grant stays until its TTL, as a dead
// process's does, and the Locker's calls fail; a Locker over another Store
// is refused.
func TestCrash(t *testing.T) {
	ctx := context.Background()
	s := memory.NewStore()
	a, b := memory.New(s, &lock.Options{TTL: time.Second}), memory.New(s, nil)
	defer a.Close()
	defer b.Close()
	if _, err := a.Lock(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if err := s.Crash(a); err != nil {
		t.Fatalf("Crash: %v", err)
	}
	if _, err := a.TryLock(ctx, "other"); err == nil || errors.Is(err, lock.ErrInvalid) {
		t.Errorf("TryLock of a crashed Locker: err = %v, want a backend failure", err)
	}
	if _, err := b.TryLock(ctx, "k"); !errors.Is(err, lock.ErrNotAcquired) {
		t.Errorf("TryLock of a crashed Locker's key: err = %v, want ErrNotAcquired (nothing released)", err)
	}
	wait, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := b.Lock(wait, "k"); err != nil {
		t.Errorf("Lock of a crashed Locker's key: %v, want it granted once the TTL has passed", err)
	}
	other := memory.New(memory.NewStore(), nil)
	defer other.Close()
	if err := s.Crash(other); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("Crash of a Locker over another Store: err = %v, want ErrInvalid", err)
	}
}
