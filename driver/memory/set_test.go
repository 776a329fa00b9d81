package memory

import (
	"context"
	"errors"
	"testing"

	"github.com/dlock-go/dlock/driver"
)

// AcquireSet refuses a set lock never passes (driver.CheckSet) and
// grants nothing: a key given twice is not granted to both leases.
func TestAcquireSetBadInput(t *testing.T) {
	d := &memDriver{s: NewStore()}
	l := func(key string) *driver.Lease {
		return &driver.Lease{Key: key, Owner: "owner-" + key, Mode: driver.Exclusive, TTL: 1e9}
	}
	a, a2 := l("a"), l("a")
	a2.Owner = "other"
	for name, ls := range map[string][]*driver.Lease{
		"empty": {}, "nil lease": {l("b"), nil}, "twice": {a, a2},
	} {
		if err := d.AcquireSet(context.Background(), ls); !errors.Is(err, driver.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if st, err := d.Inspect(context.Background(), "a"); err != nil || len(st.Holders) > 0 {
		t.Errorf("key a after the refused sets: %+v, %v; want free", st, err)
	}
}
