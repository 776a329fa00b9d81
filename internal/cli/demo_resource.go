//go:build demo

package cli

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"syscall"
)

// resource is what the demo's workers protect with a lock: a file shared by
// all worker processes of one key, recording who is inside the critical
// section and the highest fencing token seen. Each access is made atomic by
// flock(2) on the file, a local lock that guards only the bookkeeping
// itself, never the workers' critical sections.
//
// Enter, right after a grant, finds out whether another worker is still
// inside (an overlap: two holders at once) and whether the token is not
// greater than one seen before (a stale token, which a fenced resource would
// refuse). Leave, right before the release, marks the worker out. Because
// enter comes after the grant and leave before the release, an overlap it
// reports is a real one; no clock is compared across processes.
type resource struct{ f *os.File }

// Layout: inside (0 or 1), holder token, highest token: 3 little-endian
// uint64s.
const resourceSize = 24

func openResource(path string) (*resource, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	return &resource{f: f}, nil
}

func (r *resource) Close() error { return r.f.Close() }

// update runs fn on the record under an exclusive flock.
func (r *resource) update(fn func(rec *[3]uint64)) error {
	fd := int(r.f.Fd())
	if err := flock(fd, syscall.LOCK_EX); err != nil {
		return fmt.Errorf("resource: flock: %w", err)
	}
	defer flock(fd, syscall.LOCK_UN)
	var buf [resourceSize]byte
	if _, err := r.f.ReadAt(buf[:], 0); err != nil && err != io.EOF {
		return fmt.Errorf("resource: read: %w", err)
	}
	var rec [3]uint64
	for i := range rec {
		rec[i] = binary.LittleEndian.Uint64(buf[8*i:])
	}
	fn(&rec)
	for i := range rec {
		binary.LittleEndian.PutUint64(buf[8*i:], rec[i])
	}
	if _, err := r.f.WriteAt(buf[:], 0); err != nil {
		return fmt.Errorf("resource: write: %w", err)
	}
	return nil
}

// enter records token's holder as inside. overlap: another holder was
// still inside; stale: token is not greater than every earlier one.
func (r *resource) enter(token uint64) (overlap, stale bool, err error) {
	err = r.update(func(rec *[3]uint64) {
		overlap = rec[0] != 0
		stale = token <= rec[2]
		rec[0], rec[1] = 1, token
		rec[2] = max(rec[2], token)
	})
	return overlap, stale, err
}

// leave marks token's holder out, unless another one entered since (an
// overlap, already counted by enter).
func (r *resource) leave(token uint64) error {
	return r.update(func(rec *[3]uint64) {
		if rec[1] == token {
			rec[0] = 0
		}
	})
}

// state returns whether someone is inside and the highest token seen.
func (r *resource) state() (inside bool, highest uint64, err error) {
	err = r.update(func(rec *[3]uint64) { inside, highest = rec[0] != 0, rec[2] })
	return inside, highest, err
}

func flock(fd, how int) error {
	for {
		err := syscall.Flock(fd, how)
		if err != syscall.EINTR {
			return err
		}
	}
}

// fencedResource is what the fencing scene writes to: a resource that
// checks fencing tokens, as package lock asks of the resources a lock
// protects. It refuses a write whose token is below the highest it has
// taken: the writer's lease has ended, and a newer holder has written.
type fencedResource struct{ highest uint64 }

// write reports whether the resource took a write with token.
func (r *fencedResource) write(token uint64) bool {
	if token < r.highest {
		return false
	}
	r.highest = token
	return true
}
