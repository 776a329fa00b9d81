package lock

import "time"

// SetAfterResume makes l's Resume calls run f between the driver's Resume
// and the registration of the lease.
func SetAfterResume(l *Locker, f func()) {
	lk := l
	lk.afterResume = f
}

// WaitClosing waits until Close of l has begun (its calls see the Locker
// closed), for up to a second, and reports whether it has.
func WaitClosing(l *Locker) bool {
	lk := l
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		lk.mu.Lock()
		closed := lk.closed
		lk.mu.Unlock()
		if closed {
			return true
		}
	}
	return false
}
