package lock_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/lock"
)

// A Locker is a SemLocker exactly when its driver grants permits;
// Semaphores says why not otherwise, and a SemLocker whose driver also
// shares is an RWLocker too.
func TestSemaphoresByCapability(t *testing.T) {
	plain := lock.New(newFake(), nil)
	defer plain.Close()
	if _, ok := plain.(lock.SemLocker); ok {
		t.Fatal("a Locker over a driver without Semaphorer is a SemLocker")
	}
	if _, err := lock.Semaphores(plain); !errors.Is(err, lock.ErrInvalid) || !strings.Contains(err.Error(), "no semaphore permits") {
		t.Errorf("Semaphores of a Locker without permits: %v, want ErrInvalid with the reason", err)
	}
	refusing := lock.New(&semFake{fake: newFake(), err: fmt.Errorf("%w: not here, because", driver.ErrInvalid)}, nil)
	defer refusing.Close()
	if _, err := lock.Semaphores(refusing); !errors.Is(err, lock.ErrInvalid) || !strings.Contains(err.Error(), "not here, because") {
		t.Errorf("Semaphores of a refusing driver: %v, want ErrInvalid with its reason", err)
	}
	granting := lock.New(&semFake{fake: newFake()}, nil)
	defer granting.Close()
	if _, err := lock.Semaphores(granting); err != nil {
		t.Errorf("Semaphores of a granting driver: %v", err)
	}
	if _, ok := granting.(lock.RWLocker); ok {
		t.Error("a driver that shares nothing gave an RWLocker")
	}
}

type semFake struct {
	*fake
	err error
}

func (s *semFake) Semaphores() error { return s.err }
