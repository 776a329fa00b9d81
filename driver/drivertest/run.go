package drivertest

import (
	"slices"
	"testing"
)

// Skips lists the subtests (by name, such as "Shared/ReadersShare") that
// a driver's hookup expects to skip, each with the reason: what its
// backend cannot do. Run fails a subtest that skips without being listed,
// and one listed that runs to the end: a capability flag turned off by
// mistake, or a check that stopped running, cannot hide as a skip.
type Skips map[string]string

// subtest is one named check of the suite.
type subtest struct {
	name string
	fn   func(t *testing.T, h Harness)
}

var subtests = []subtest{
	{"C1/MutualExclusion", testMutualExclusion},
	{"C1/TryLockHeld", testTryLockHeld},
	{"C2/OwnerCheckedAfterExpiry", testOwnerCheckedAfterExpiry},
	{"C2/OwnerCheckedAfterTakeover", testOwnerCheckedAfterTakeover},
	{"C3/GrantCarriesExpiry", testGrantCarriesExpiry},
	{"C4/AbandonedLeaseExpires", testAbandonedLeaseExpires},
	{"C5/FencingIncreases", testFencingIncreases},
	{"C5/FencingAfterCounterLoss", testFencingAfterCounterLoss},
	{"C6/DoneOnDelete", testDoneOnDelete},
	{"C6/DoneOnSteal", testDoneOnSteal},
	{"C6/DoneBeforeRegrant", testDoneBeforeRegrant},
	{"C6/DeadlineWithoutRenewal", testDeadlineWithoutRenewal},
	{"C6/DeadlineWithinValidity", testDeadlineWithinValidity},
	{"C6/LongWaitFullLease", testLongWaitFullLease},
	{"Validity/WithoutRenewal", testValidityWithoutRenewal},
	{"Validity/AfterRefresh", testValidityAfterRefresh},
	{"C7/CancelWaiting", testCancelWaiting},
	{"C7/CancelManyWaiters", testCancelManyWaiters},
	{"C8/CloseReleases", testCloseReleases},
	{"C8/CloseStopsWaiters", testCloseStopsWaiters},
	{"C8/CloseLeaksNoGoroutine", testCloseLeaksNoGoroutine},
	{"C9/InvalidInput", testInvalidInput},
	{"C9/OddKeys", testOddKeys},
	{"C10/WakeUp", testWakeUp},
	{"C11/Errors", testErrors},
	{"Do/CancelsOnLoss", testDoCancelsOnLoss},
	{"Shared/ReadersShare", testReadersShare},
	{"Shared/WriterExcludes", testWriterExcludes},
	{"Shared/WriterNotStarved", testWriterNotStarved},
	{"Resume/TakesOver", testResumeTakesOver},
	{"Resume/Gone", testResumeGone},
	{"Resume/AfterCrash", testResumeAfterCrash},
	{"Resume/NeverShortens", testResumeNeverShortens},
	{"Resume/RenewalNeverShortens", testResumeRenewalNeverShortens},
	{"Resume/LossKeepsResumed", testResumeLossKeepsResumed},
	{"Reentry/CountsHolds", testReentryCountsHolds},
	{"Reentry/ShortHold", testReentryShortHold},
	{"Reentry/LostTogether", testReentryLostTogether},
	{"Reentry/Resume", testReentryResume},
	{"Semaphore/Limit", testSemaphoreLimit},
	{"Semaphore/Contention", testSemaphoreContention},
	{"Semaphore/LimitMismatch", testSemaphoreLimitMismatch},
	{"Semaphore/CrashedHolder", testSemaphoreCrashedHolder},
	{"Semaphore/Cancel", testSemaphoreCancel},
	{"Semaphore/FIFO", testSemaphoreFIFO},
	{"Semaphore/DoneOnDelete", testSemaphoreDoneOnDelete},
	{"Semaphore/Resume", testSemaphoreResume},
	{"Inspect/Holders", testInspectHolders},
	{"Inspect/Shared", testInspectShared},
	{"Inspect/Expired", testInspectExpired},
	{"Inspect/Waiters", testInspectWaiters},
	{"Outage/LockWaits", testOutageLockWaits},
	{"Outage/TryLockFails", testOutageTryLockFails},
}

// Run runs every subtest of the suite, each with a fresh Harness from
// newHarness, and holds each to skips: a subtest skips if and only if
// skips lists it. Subtests left out by -run are not judged. Run must not
// run in parallel with other tests of the process (see the package doc).
func Run(t *testing.T, newHarness func(t *testing.T) Harness, skips Skips) {
	for name := range skips {
		if !slices.ContainsFunc(subtests, func(s subtest) bool { return s.name == name }) {
			t.Errorf("Skips lists %q, which is no subtest of the suite", name)
		}
	}
	for _, tc := range subtests {
		var ran *testing.T
		t.Run(tc.name, func(t *testing.T) {
			ran = t
			tc.fn(t, newHarness(t))
		})
		if ran == nil {
			continue
		}
		switch why, listed := skips[tc.name]; {
		case ran.Skipped() && !listed:
			t.Errorf("%s skipped, and the hookup's Skips does not list it: a capability flag or a check no longer runs what it should", tc.name)
		case !ran.Skipped() && listed:
			t.Errorf("%s ran, and the hookup's Skips lists it as skipped (%s): update the list", tc.name, why)
		}
	}
}
