package conformance

import "testing"

// Run runs every subtest of the suite, each with a fresh Harness from
// newHarness.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	tests := []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
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
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, newHarness(t))
		})
	}
}
