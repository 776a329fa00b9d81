package driver_test

import (
	"errors"
	"testing"

	"github.com/dlock-go/dlock/driver"
)

func TestCheckSet(t *testing.T) {
	l := func(key string) *driver.Lease {
		return &driver.Lease{Key: key, Owner: "o-" + key, Mode: driver.Exclusive}
	}
	shared := l("s")
	shared.Mode = driver.Shared
	re := l("r")
	re.Reentry = true
	noted := l("n")
	noted.Note = "x"
	for name, ls := range map[string][]*driver.Lease{
		"nil":       nil,
		"empty":     {},
		"nil lease": {l("a"), nil},
		"twice":     {l("a"), l("b"), l("a")},
		"shared":    {l("a"), shared},
		"reentry":   {re, l("b")},
		"note":      {l("a"), noted},
	} {
		if err := driver.CheckSet(ls); !errors.Is(err, driver.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if err := driver.CheckSet([]*driver.Lease{l("a"), l("b")}); err != nil {
		t.Errorf("a good set: %v", err)
	}
}
