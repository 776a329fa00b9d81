package lock_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver/memory"
	"github.com/dlock-go/dlock/internal/testsupport/settest"
	"github.com/dlock-go/dlock/lock"
)

// A set taken in one backend step stores WithNote's note with each
// member's grant, as the one-by-one path does.
func TestAudit42LockManyNote(t *testing.T) {
	ctx := context.Background()
	lk := memory.New(memory.NewStore(), nil)
	defer lk.Close()
	for _, try := range []bool{false, true} {
		take := lk.LockMany
		if try {
			take = lk.TryLockMany
		}
		m, err := take(ctx, []string{"a", "b"}, lock.WithNote("host:1"))
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range m.Keys() {
			st, err := lk.Inspect(ctx, k)
			if err != nil || len(st.Holders) != 1 || st.Holders[0].Note != "host:1" {
				t.Errorf("try=%v atomic=%v: Inspect(%q) holders %+v, %v; want note host:1", try, m.Atomic(), k, st.Holders, err)
			}
		}
		m.Unlock(ctx)
	}
}

// Nil and zero inputs to the issue-42 API return ErrInvalid; none panics.
func TestAudit42NilInputs(t *testing.T) {
	ctx := context.Background()
	var nilCtx context.Context
	lk := memory.New(memory.NewStore(), &lock.Options{ReleaseTimeout: time.Second})
	defer lk.Close()
	e, _ := lk.Election("e")
	var nilE *lock.Election
	zeroE := &lock.Election{}
	var nilM *lock.MultiLease
	zeroM := &lock.MultiLease{}
	zeroLk := &lock.Locker{}
	var nilLk *lock.Locker
	for _, c := range []struct {
		name string
		call func() error
	}{
		{"Campaign(nil ctx)", func() error { _, err := e.Campaign(nilCtx, "x"); return err }},
		{"TryCampaign(nil ctx)", func() error { _, err := e.TryCampaign(nilCtx, "x"); return err }},
		{"Leader(nil ctx)", func() error { _, err := e.Leader(nilCtx); return err }},
		{"Campaign(nil Option)", func() error { _, err := e.Campaign(ctx, "x", nil); return err }},
		{"nil Election Campaign", func() error { _, err := nilE.Campaign(ctx, "x"); return err }},
		{"nil Election Leader", func() error { _, err := nilE.Leader(ctx); return err }},
		{"nil Election Observe", func() error { _, err := nilE.Observe(ctx); return err }},
		{"zero Election Campaign", func() error { _, err := zeroE.Campaign(ctx, "x"); return err }},
		{"zero Election Observe", func() error { _, err := zeroE.Observe(ctx); return err }},
		{"zero Election Name", func() error {
			if zeroE.Name() != "" || nilE.Name() != "" {
				return errors.New("name")
			}
			return lock.ErrInvalid
		}},
		{"zero Locker Campaign", func() error {
			ze, err := zeroLk.Election("e")
			if err != nil {
				return err
			}
			_, err = ze.Campaign(ctx, "x")
			return err
		}},
		{"zero Locker LockMany", func() error { _, err := zeroLk.LockMany(ctx, []string{"a", "b"}); return err }},
		{"nil Locker LockMany", func() error { _, err := nilLk.LockMany(ctx, []string{"a"}); return err }},
		{"LockMany(nil ctx)", func() error { _, err := lk.LockMany(nilCtx, []string{"a"}); return err }},
		{"LockMany(nil keys)", func() error { _, err := lk.LockMany(ctx, nil); return err }},
		{`LockMany("")`, func() error { _, err := lk.LockMany(ctx, []string{"a", ""}); return err }},
		{"LockMany(nil Option)", func() error { _, err := lk.LockMany(ctx, []string{"a", "b"}, nil); return err }},
		{"TryLockMany(nil Option)", func() error { _, err := lk.TryLockMany(ctx, []string{"a", "b"}, nil); return err }},
		{"LockMany(65 keys)", func() error {
			ks := make([]string, lock.MaxKeys+1)
			for i := range ks {
				ks[i] = fmt.Sprint(i)
			}
			_, err := lk.LockMany(ctx, ks)
			return err
		}},
		{"nil MultiLease Unlock", func() error { return nilM.Unlock(ctx) }},
		{"zero MultiLease Unlock", func() error { return zeroM.Unlock(ctx) }},
		{"zero MultiLease Err", func() error { return zeroM.Err() }},
		{"MultiLease Unlock(nil ctx)", func() error {
			m, err := lk.LockMany(ctx, []string{"a", "b"})
			if err != nil {
				return err
			}
			return m.Unlock(nilCtx)
		}},
		{"RunElection(nil ctx)", func() error { return lock.RunElection(nilCtx, lk, "e", "x", lock.LeaderCallbacks{}) }},
		{"RunElection(nil Locker)", func() error { return lock.RunElection(ctx, nil, "e", "x", lock.LeaderCallbacks{}) }},
		{"RunElection(zero Locker)", func() error {
			return lock.RunElection(ctx, zeroLk, "e", "x", lock.LeaderCallbacks{OnNewLeader: func(lock.Leader) {}})
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var err error
			func() {
				defer func() {
					if r := recover(); r != nil {
						err = fmt.Errorf("panic: %v", r)
					}
				}()
				err = c.call()
			}()
			if !errors.Is(err, lock.ErrInvalid) {
				t.Errorf("%s: %v; want ErrInvalid", c.name, err)
			}
		})
	}
}

// Two candidates that campaign with the same named owner (WithOwner) must
// not both lead: re-entry would hand the second the first's term, so two
// processes would act as leader with one fencing token, which no resource
// can tell apart.
func TestAudit42CampaignNamedOwner(t *testing.T) {
	ctx := context.Background()
	s := memory.NewStore()
	a, b := memory.New(s, nil), memory.New(s, nil)
	defer a.Close()
	defer b.Close()
	ea, _ := a.Election("e")
	eb, _ := b.Election("e")
	t1, err := ea.Campaign(ctx, "a:1", lock.WithOwner("sched"))
	if err != nil {
		if errors.Is(err, lock.ErrInvalid) {
			return // refused: fine
		}
		t.Fatal(err)
	}
	defer t1.Unlock(ctx)
	tctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	t2, err := eb.TryCampaign(tctx, "b:1", lock.WithOwner("sched"))
	if err == nil {
		defer t2.Unlock(ctx)
		l, _ := eb.Leader(ctx)
		t.Errorf("two leaders at once: a's term %d and b's term %d (Leader says %+v)", t1.Token(), t2.Token(), l)
	}
}

// A Close racing a LockMany whose one-step attempt was granted must not
// leave members held: every grant the call made is either the caller's
// (and Close releases it) or released by the call.
func TestAudit42LockManyCloseRace(t *testing.T) {
	ctx := context.Background()
	keys := []string{"a", "b", "c", "d"}
	granted := 0
	defer func() { t.Logf("%d of 3000 LockMany calls were granted before Close", granted) }()
	for i := 0; i < 3000; i++ {
		s := memory.NewStore()
		a, b := memory.New(s, nil), memory.New(s, nil)
		got := make(chan *lock.MultiLease, 1)
		go func() {
			m, _ := a.LockMany(ctx, keys)
			got <- m
		}()
		for j := 0; j < i%200; j++ {
			runtime.Gosched()
		}
		a.Close()
		if m := <-got; m != nil {
			granted++
		}
		var m *lock.MultiLease
		var err error
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if m, err = b.TryLockMany(ctx, keys); err == nil {
				break
			}
		}
		if err != nil {
			for _, k := range keys {
				st, _ := b.Inspect(ctx, k)
				t.Logf("%s: %+v", k, st.Holders)
			}
			t.Fatalf("iteration %d: after Close, the set is still held 2s later: %v", i, err)
		}
		m.Unlock(ctx)
		b.Close()
	}
}

// A term that lapsed (not renewed past its TTL) is not reported by
// Leader: observers see no leader once another could be elected.
func TestAudit42LeaderLapsed(t *testing.T) {
	ctx := context.Background()
	s := memory.NewStore()
	a, b := memory.New(s, nil), memory.New(s, nil)
	defer a.Close()
	defer b.Close()
	ea, _ := a.Election("e")
	eb, _ := b.Election("e")
	t1, err := ea.Campaign(ctx, "a:1", lock.WithTTL(200*time.Millisecond), lock.WithAutoRenew(false))
	if err != nil {
		t.Fatal(err)
	}
	<-t1.Done()
	time.Sleep(100 * time.Millisecond)
	if l, err := eb.Leader(ctx); !errors.Is(err, lock.ErrNoLeader) {
		t.Errorf("Leader after the term lapsed: %+v, %v; want ErrNoLeader", l, err)
	}
	t2, err := eb.TryCampaign(ctx, "b:1")
	if err != nil {
		t.Fatalf("TryCampaign after the term lapsed: %v", err)
	}
	if t2.Token() <= t1.Token() {
		t.Errorf("term %d after lapsed term %d", t2.Token(), t1.Token())
	}
	t2.Unlock(ctx)
}

func TestAudit42SetStress(t *testing.T) {
	s := memory.NewStore()
	settest.Stress(t, func() *lock.Locker { return memory.New(s, nil) })
}

// Observe "does not wait for a slow reader: a reader sees the state as
// of its latest read": a reader that comes back after the leader changed
// twice gets the current leader, not the one of its last reading.
func TestAudit42ObserveSlowReader(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := memory.NewStore()
	a, b := memory.New(s, nil), memory.New(s, nil)
	defer a.Close()
	defer b.Close()
	ea, _ := a.Election("e")
	eb, _ := b.Election("e")
	leaders, err := eb.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	<-leaders // no leader yet
	t1, err := ea.Campaign(ctx, "a:1")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(600 * time.Millisecond) // Observe reads a's term, and waits to send it
	t1.Unlock(ctx)
	t2, err := eb.Campaign(ctx, "b:1")
	if err != nil {
		t.Fatal(err)
	}
	defer t2.Unlock(ctx)
	time.Sleep(time.Second) // several reads of b's term
	if got := <-leaders; got.Term != t2.Token() || got.Announcement != "b:1" {
		t.Errorf("a slow reader got %+v; want b:1 in term %d (a's term %d ended 1s ago)", got, t2.Token(), t1.Token())
	}
}
