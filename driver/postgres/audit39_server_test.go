package postgres

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
)

// TestAudit39ServerFaultsInRow: a grant in the key's row through a
// server killed and restarted (the commit was flushed: the grant is
// still the key's, and the holder keeps it or learns it lost before
// another is granted) and a server paused past the TTL (the holder's
// Done closes before the next grant; tokens rise).
func TestAudit39ServerFaultsInRow(t *testing.T) {
	pg := testserver.StartPostgres(t, nil)
	pg.RequireFaults(t)
	url := pg.URL()
	ctx := tctx(t, 2*time.Minute)
	a := newTestLocker(t, url, &lock.Options{TTL: 3 * time.Second}, &netCut{})
	b := newTestLocker(t, url, &lock.Options{TTL: 3 * time.Second}, &netCut{})

	t.Run("kill", func(t *testing.T) {
		key := auditKey("audit39-kill")
		la, err := a.Lock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if err := pg.Node(0).Kill(); err != nil {
			t.Fatal(err)
		}
		if err := pg.Node(0).Restart(); err != nil {
			t.Fatal(err)
		}
		var lb *lock.Lease
		for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			lb, err = b.TryLock(ctx, key)
			if err == nil || errors.Is(err, lock.ErrHeld) {
				break
			}
		}
		now := time.Now()
		if err == nil {
			select {
			case <-la.Done():
			default:
				t.Fatalf("two holders after a restart: tokens %d and %d, the first lease's Done open", la.Token(), lb.Token())
			}
			if la.Deadline().After(now) {
				t.Fatalf("granted %v before the first lease's deadline", la.Deadline().Sub(now))
			}
			if lb.Token() <= la.Token() {
				t.Errorf("token %d after %d", lb.Token(), la.Token())
			}
			lb.Unlock(ctx)
			return
		}
		if !errors.Is(err, lock.ErrHeld) {
			t.Fatalf("TryLock after the restart: %v", err)
		}
		t.Logf("after the restart the key is still held; the holder's lease: %v", la.Err())
		la.Unlock(ctx)
	})
	t.Run("pause", func(t *testing.T) {
		key := auditKey("audit39-pause")
		la, err := a.Lock(ctx, key, lock.WithTTL(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if err := pg.Node(0).Pause(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second)
		if err := pg.Node(0).Resume(); err != nil {
			t.Fatal(err)
		}
		lb, err := b.Lock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		granted := time.Now()
		defer lb.Unlock(ctx)
		select {
		case <-la.Done():
		default:
			t.Fatalf("two holders after a pause: tokens %d and %d, the first lease's Done open", la.Token(), lb.Token())
		}
		if la.Deadline().After(granted) {
			t.Fatalf("granted %v before the first lease's deadline", la.Deadline().Sub(granted))
		}
		if lb.Token() <= la.Token() {
			t.Errorf("token %d after %d", lb.Token(), la.Token())
		}
	})
}
