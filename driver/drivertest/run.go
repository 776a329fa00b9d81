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
//
// The subtests that need grant notes (Caps.Notes) are the one exception:
// where the harness's Caps.Notes is unset, they are expected to skip
// without being listed, since each first checks the flag against the
// Locker both ways (Supports(lock.Notes) must refuse), so a flag turned
// off by mistake fails there instead.
type Skips map[string]string

// subtest is one named check of the suite.
type subtest struct {
	name string
	fn   func(t *testing.T, h Harness)
	// unless, when set, says why the subtest is expected to skip for a
	// harness with caps c ("" when it must run): see Skips.
	unless func(c Caps) string
}

// needsNotes is the unless of the subtests that need Caps.Notes.
func needsNotes(c Caps) string {
	if c.Notes {
		return ""
	}
	return "the driver stores no grant notes (Caps.Notes)"
}

var subtests = []subtest{
	{"C1/MutualExclusion", testMutualExclusion, nil},
	{"C1/TryLockHeld", testTryLockHeld, nil},
	{"C2/OwnerCheckedAfterExpiry", testOwnerCheckedAfterExpiry, nil},
	{"C2/OwnerCheckedAfterTakeover", testOwnerCheckedAfterTakeover, nil},
	{"C3/GrantCarriesExpiry", testGrantCarriesExpiry, nil},
	{"C4/AbandonedLeaseExpires", testAbandonedLeaseExpires, nil},
	{"C5/FencingIncreases", testFencingIncreases, nil},
	{"C5/FencingAfterCounterLoss", testFencingAfterCounterLoss, nil},
	{"C6/DoneOnDelete", testDoneOnDelete, nil},
	{"C6/DoneOnSteal", testDoneOnSteal, nil},
	{"C6/DoneBeforeRegrant", testDoneBeforeRegrant, nil},
	{"C6/DeadlineWithoutRenewal", testDeadlineWithoutRenewal, nil},
	{"C6/DeadlineWithinValidity", testDeadlineWithinValidity, nil},
	{"C6/LongWaitFullLease", testLongWaitFullLease, nil},
	{"Validity/WithoutRenewal", testValidityWithoutRenewal, nil},
	{"Validity/AfterRefresh", testValidityAfterRefresh, nil},
	{"C7/CancelWaiting", testCancelWaiting, nil},
	{"C7/CancelManyWaiters", testCancelManyWaiters, nil},
	{"C8/CloseReleases", testCloseReleases, nil},
	{"C8/CloseStopsWaiters", testCloseStopsWaiters, nil},
	{"C8/CloseLeaksNoGoroutine", testCloseLeaksNoGoroutine, nil},
	{"C9/InvalidInput", testInvalidInput, nil},
	{"C9/OddKeys", testOddKeys, nil},
	{"C10/WakeUp", testWakeUp, nil},
	{"C11/Errors", testErrors, nil},
	{"Do/CancelsOnLoss", testDoCancelsOnLoss, nil},
	{"Shared/ReadersShare", testReadersShare, nil},
	{"Shared/WriterExcludes", testWriterExcludes, nil},
	{"Shared/WriterNotStarved", testWriterNotStarved, nil},
	{"Resume/TakesOver", testResumeTakesOver, nil},
	{"Resume/Gone", testResumeGone, nil},
	{"Resume/AfterCrash", testResumeAfterCrash, nil},
	{"Resume/NeverShortens", testResumeNeverShortens, nil},
	{"Resume/RenewalNeverShortens", testResumeRenewalNeverShortens, nil},
	{"Resume/LossKeepsResumed", testResumeLossKeepsResumed, nil},
	{"Reentry/CountsHolds", testReentryCountsHolds, nil},
	{"Reentry/ShortHold", testReentryShortHold, nil},
	{"Reentry/LostTogether", testReentryLostTogether, nil},
	{"Reentry/Resume", testReentryResume, nil},
	{"Semaphore/Limit", testSemaphoreLimit, nil},
	{"Semaphore/Contention", testSemaphoreContention, nil},
	{"Semaphore/LimitMismatch", testSemaphoreLimitMismatch, nil},
	{"Semaphore/CrashedHolder", testSemaphoreCrashedHolder, nil},
	{"Semaphore/Cancel", testSemaphoreCancel, nil},
	{"Semaphore/FIFO", testSemaphoreFIFO, nil},
	{"Semaphore/DoneOnDelete", testSemaphoreDoneOnDelete, nil},
	{"Semaphore/Resume", testSemaphoreResume, nil},
	{"Inspect/Holders", testInspectHolders, nil},
	{"Inspect/Shared", testInspectShared, nil},
	{"Inspect/Expired", testInspectExpired, nil},
	{"Inspect/Waiters", testInspectWaiters, nil},
	{"Inspect/Notes", testInspectNotes, needsNotes},
	{"Election/CampaignResign", testElectionCampaignResign, nil},
	{"Election/TermsIncrease", testElectionTermsIncrease, nil},
	{"Election/DoneBeforeNextLeader", testElectionDoneBeforeNextLeader, nil},
	{"Election/CancelLeavesNothing", testElectionCancelLeavesNothing, nil},
	{"Election/Observe", testElectionObserve, needsNotes},
	{"Outage/LockWaits", testOutageLockWaits, nil},
	{"Outage/TryLockFails", testOutageTryLockFails, nil},
	{"Multi/AllOrNothing", testMultiAllOrNothing, nil},
	{"Multi/OppositeOrders", testMultiOppositeOrders, nil},
	{"Multi/DoneOnLoss", testMultiDoneOnLoss, nil},
	{"Multi/UnlockReleasesAll", testMultiUnlockReleasesAll, nil},
	{"Multi/CancelMidway", testMultiCancelMidway, nil},
	{"Multi/InvalidInput", testMultiInvalidInput, nil},
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
		var (
			ran *testing.T
			h   Harness
		)
		t.Run(tc.name, func(t *testing.T) {
			ran, h = t, newHarness(t)
			tc.fn(t, h)
		})
		if ran == nil {
			continue
		}
		why, listed := skips[tc.name]
		if !listed && tc.unless != nil && h != nil {
			why = tc.unless(h.Caps())
			listed = why != ""
		}
		switch {
		case ran.Skipped() && !listed:
			t.Errorf("%s skipped, and the hookup's Skips does not list it: a capability flag or a check no longer runs what it should", tc.name)
		case !ran.Skipped() && listed:
			t.Errorf("%s ran, and the hookup's Skips lists it as skipped (%s): update the list", tc.name, why)
		}
	}
}
