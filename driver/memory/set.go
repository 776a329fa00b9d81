package memory

import (
	"context"

	"github.com/dlock-go/dlock/driver"
)

// AcquireSet implements driver.SetAcquirer: under the Store's one mutex,
// it grants every lease of ls if Acquire would grant each (a key's
// queued waiters are not passed), and none otherwise.
func (d *memDriver) AcquireSet(ctx context.Context, ls []*driver.Lease) error {
	if err := driver.CheckSet(ls); err != nil {
		return err
	}
	if err := d.alive(ctx); err != nil {
		return err
	}
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	qs := make([]*queue, len(ls))
	var held error
	for i, l := range ls {
		q := s.queueLocked(l.Key, true)
		qs[i] = q
		q.entries = append(q.entries, newEntry(l, nil))
		if held == nil && !q.grantable(len(q.entries)-1) {
			held = &driver.HeldError{RetryAfter: d.untilFree(q)}
		}
	}
	for i, l := range ls {
		q := qs[i]
		e := q.entries[len(q.entries)-1]
		if held != nil {
			q.entries = q.entries[:len(q.entries)-1]
			s.dropIfEmptyLocked(l.Key, q)
			continue
		}
		d.grantLocked(l, e)
	}
	return held
}
