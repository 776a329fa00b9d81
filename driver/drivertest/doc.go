// Package drivertest is the conformance suite of dlock drivers: it checks,
// through package lock and against a real backend, that a driver keeps the
// contract of docs/design.md (C1-C11: mutual exclusion, owner-checked
// release and refresh, expiry, fencing tokens, Done on loss, cancellation,
// Close, input checks, wake-ups, errors) and does what its capabilities
// claim (shared leases, Resume, named owners' holds, semaphores, Inspect).
// Every driver of this module passes it. A driver written elsewhere proves
// the same with a hookup of its own, one _test.go file:
//
//	func TestConformance(t *testing.T) {
//		drivertest.Run(t, func(t *testing.T) drivertest.Harness { return newHarness(t) }, skips)
//	}
//
// The Harness makes Lockers of the driver (lock.New, or lock.OpenWith of a
// URL), crashes one, tampers with a key behind their back (DeleteKey,
// StealKey, DeleteCounter) and reads what the backend keeps of a key
// (Residue, Dump); its Caps say what the backend can do. A hookup needs
// nothing but this package, lock and its own driver: this package's
// example_test.go is one, for the memory driver reached by its URL, and
// driver/memory's conformance_test.go is the worked example of
// docs/design.md, "Writing a driver".
//
// Run runs one named subtest per check, grouped by contract item (C1/ to
// C11/) and then by feature (Do/, Shared/, Resume/, Reentry/,
// Semaphore/, Inspect/, Election/), and Outage/, which stops and starts a server of
// its own (Caps.Outage) to check lock's outage rule. Each subtest gets a fresh Harness and keys of its
// own, named dlock-conformance/.... Caps turn off only what a backend
// cannot do, never a safety property: where a flag is unset, the suite
// checks what it can see (that lock refuses the capability with
// ErrInvalid) and skips the rest. A subtest may skip only if the hookup's
// Skips lists it, with the reason; Run fails one that skips unlisted, or
// runs to the end listed, so a flag turned off by mistake cannot pass as a
// skip.
//
// The suite takes a minute or more, as it waits out TTLs and session
// timeouts. Its subtests run one at a time, and no other test of the
// package may run in parallel with Run: C8/CloseLeaksNoGoroutine counts
// every goroutine of the process, and one that a test server or another
// test starts while it runs counts as a leak. Start the backend before Run
// (in TestMain, or at the top of the test), not in NewLocker.
package drivertest
