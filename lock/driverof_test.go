package lock

import "github.com/dlock-go/dlock/driver"

// DriverOf returns the driver a Locker was made with, so that a test can
// wrap a real driver (the memory driver's, which has no exported
// constructor of its own) and change one of its calls.
func DriverOf(l *Locker) driver.Driver {
	lk := l
	return lk.d
}
