package drivertest

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/lock"
)

// The Validity subtests hold a lease to the validity it reports
// (Lease.Validity): the time the backend is sure to keep the grant after
// the call that granted or refreshed it was sent, which may differ from
// the TTL asked for (memcached's whole seconds, ZooKeeper's session). The
// lease must live that long, less the drift margin, and no longer; the
// backend must keep the grant from everyone else that long; and the key
// must be free soon after.

// validityTTL is the TTL the Validity subtests ask for: the README's
// example, which memcached turns into one second and ZooKeeper ignores.
// A driver that refuses it is tested at Caps.MinTTL.
const validityTTL = 3 * time.Second

// Margins of the Validity subtests: how early Done may close before the
// deadline (timer and monitor ticks), how late after it (a loaded
// machine), and how long after the validity (or TTL) the key may take to
// be free for another Locker (a server's expiry tick, a waiter's wake-up).
const (
	validityEarly = 20 * time.Millisecond
	validityLate  = 250 * time.Millisecond
	validityFree  = time.Second
)

// sentSpan is when a grant or refresh call was under way: its request was
// sent between from and to.
type sentSpan struct{ from, to time.Time }

// Validity/WithoutRenewal: a lease granted without renewal reports its
// validity, ends when that validity (less the drift margin) has passed
// since the grant, is held against others until then, and leaves the key
// free soon after.
func testValidityWithoutRenewal(t *testing.T, h Harness) {
	c := h.Caps()
	a, b := h.NewLocker(t, nil), h.NewLocker(t, nil)
	k := key(t)
	lease, sent := lockForValidity(t, c, a, k)
	checkValidity(t, "grant", c, lease, sent)
	checkValidityKept(t, c, b, k, lease, sent)
}

// Validity/AfterRefresh: the validity a Refresh reports holds even when
// the holder is cut off from the backend right after it, so that no
// later proof can help: the lease must last the reported validity (less
// the drift margin) from the refresh, and the backend keep the grant
// that long. On a session-bound backend whose session is shorter than
// the TTL (ZooKeeper), the validity is what the driver can prove of the
// session, not the session timeout from the refresh: a refresh that only
// reads proves nothing to the server that expires sessions.
func testValidityAfterRefresh(t *testing.T, h Harness) {
	c := h.Caps()
	a, b := h.NewLocker(t, nil), h.NewLocker(t, nil)
	k := key(t)
	lease, _ := lockForValidity(t, c, a, k)
	// A third of the way to the deadline, as a renewal would come: the
	// backend's proof of the grant (a session's) is no longer fresh.
	time.Sleep(time.Until(lease.Deadline()) / 3)
	from := time.Now()
	if err := lease.Refresh(ctx(t, 10*time.Second), lease.TTL()); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	sent := sentSpan{from, time.Now()}
	h.Crash(t, a)
	checkValidity(t, "refresh", c, lease, sent)
	checkValidityKept(t, c, b, k, lease, sent)
}

// lockForValidity locks k through l with validityTTL (or the driver's
// least TTL) and renewal off, and returns the lease and when its grant
// was sent.
func lockForValidity(t *testing.T, c Caps, l *lock.Locker, k string) (*lock.Lease, sentSpan) {
	t.Helper()
	ttl := validityTTL
	for {
		from := time.Now()
		lease, err := l.Lock(ctx(t, 10*time.Second), k, lock.WithTTL(ttl), lock.WithDisableAutoRenew(true))
		to := time.Now()
		if errors.Is(err, lock.ErrInvalid) && ttl < c.MinTTL {
			ttl = c.MinTTL
			continue
		}
		if err != nil {
			t.Fatalf("Lock(%q) with TTL %v: %v", k, ttl, err)
		}
		if got := lease.TTL(); got != ttl {
			t.Errorf("TTL() = %v, want the %v asked for", got, ttl)
		}
		return lease, sentSpan{from, to}
	}
}

// checkValidity checks the validity lease reports after the grant or
// refresh (what) sent within sent: positive, no more than the backend can
// give for the lease's TTL, and what its Deadline is counted with, from
// that call.
func checkValidity(t *testing.T, what string, c Caps, lease *lock.Lease, sent sentSpan) {
	t.Helper()
	ttl, v := lease.TTL(), lease.Validity()
	bound := ttl
	if c.SessionBound {
		bound = c.SessionTimeout
	}
	if v <= 0 || v > bound {
		t.Fatalf("after the %s, Validity() = %v; want within (0, %v] (TTL %v)", what, v, bound, ttl)
	}
	room := v - driver.DriftMargin(v)
	dl := lease.Deadline()
	if lo, hi := sent.from.Add(room), sent.to.Add(room); dl.Before(lo) || dl.After(hi) {
		t.Errorf("after the %s, Deadline is %v after the call began; want Validity %v less the drift margin, within [%v, %v]",
			what, dl.Sub(sent.from), v, room, hi.Sub(sent.from))
	}
	t.Logf("%s: TTL %v, Validity %v", what, ttl, v)
}

// Probing a held key: from validityProbeFrom before the holder's
// Deadline until the Deadline, another Locker tries the key every
// validityProbeEvery. A backend that ends grants early (an expiry tick
// ahead of the TTL, a purge by a clock that runs fast) grants one of the
// tries before the Deadline.
const (
	validityProbeFrom  = time.Second
	validityProbeEvery = 3 * time.Millisecond
)

// probeUntil tries k through other, held through another Locker until
// dl, from validityProbeFrom before dl until dl: it fails the test if a
// try returns granted before dl. A try that was still under way at dl
// proves nothing either way, and ends the probing.
func probeUntil(t *testing.T, other *lock.Locker, k string, dl time.Time) {
	t.Helper()
	time.Sleep(time.Until(dl.Add(-validityProbeFrom)))
	tries := 0
	for time.Now().Before(dl) {
		tries++
		l, err := other.TryLock(ctx(t, 10*time.Second), k)
		at := time.Now()
		if err == nil {
			if at.Before(dl) {
				t.Errorf("another Locker was granted the key %v before the lease's Deadline (try %d, one every %v from %v before it)",
					dl.Sub(at), tries, validityProbeEvery, validityProbeFrom)
			}
			l.Unlock(ctx(t, 10*time.Second))
			return
		}
		if !errors.Is(err, lock.ErrNotAcquired) {
			t.Errorf("TryLock %v before the Deadline: %v", dl.Sub(at), err)
			return
		}
		time.Sleep(min(validityProbeEvery, time.Until(dl)))
	}
	t.Logf("%d tries of the key in the %v before the Deadline: none granted", tries, validityProbeFrom)
}

// checkValidityKept waits for lease, held through another Locker than
// other, to end by itself: the backend must keep its grant from other
// until its deadline, its Done must close no earlier than the validity
// (less the drift margin) after sent and not long after its deadline,
// and the key must be free for other within the validity, or the longer
// time the backend may keep the grant for (a TTL backend: the TTL, which
// memcached applies in whole seconds; a session-bound one: the session
// timeout, which a crashed holder's session outlives its last proof by),
// plus a second.
func checkValidityKept(t *testing.T, c Caps, other *lock.Locker, k string, lease *lock.Lease, sent sentSpan) {
	t.Helper()
	v, dl := lease.Validity(), lease.Deadline()
	probeUntil(t, other, k, dl)
	due := newCanary(dl)
	at, ok := awaitBy(lease.Done(), due, validityLate)
	if !ok {
		t.Fatalf("Done still open %v after the Deadline, with renewal off", validityLate)
	}
	checkBy(t, due, at, validityLate, "Done closed %v after the Deadline", at.Sub(dl))
	ended := at.Sub(sent.from)
	if room := v - driver.DriftMargin(v) - validityEarly; ended < room {
		t.Errorf("Done closed %v after the call began (%v before its Deadline), Validity %v; want no earlier than %v: the lease claimed more than its backend could keep (%v)",
			ended, time.Until(dl), v, room, lease.Err())
	}
	if !errors.Is(lease.Err(), lock.ErrLost) {
		t.Errorf("Err() = %v, want ErrLost", lease.Err())
	}
	keep := max(v, lease.TTL())
	if c.SessionBound {
		keep = max(v, c.SessionTimeout) // a crashed holder's session lives that long
	}
	freeBy := sent.from.Add(keep + validityFree)
	free := newCanary(sent.from.Add(keep))
	l, err := other.Lock(ctx(t, time.Until(freeBy)+5*time.Second), k)
	if err != nil {
		t.Fatalf("key not free after the lease ended: %v", err)
	}
	defer l.Unlock(ctx(t, 10*time.Second))
	checkBy(t, free, time.Now(), validityFree, "key free %v after the call began; want within %v (Validity %v, TTL %v) plus %v",
		time.Since(sent.from), keep, v, lease.TTL(), validityFree)
}
