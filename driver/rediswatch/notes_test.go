package rediswatch

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/testsupport/redisacl"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// TestNotesMinimalPermissions: grant notes in every mode, renewed and
// resumed, read by Inspect and deleted with their grants (see
// redisacl.ExerciseNotes), as a user allowed only the package doc's ACL
// rules, on one server and on a Cluster; no refusal in any node's ACL
// LOG, and no script run.
func TestNotesMinimalPermissions(t *testing.T) {
	rules := redisacl.DocRules(t, "doc.go")
	t.Run("standalone", func(t *testing.T) {
		srv := testserver.StartRedis(t, &testserver.RedisOptions{User: "dlock-min", ACLRules: rules})
		admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		defer admin.Close()
		exerciseNotes(t, redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: srv.Username, Password: srv.Password}), admin)
		redisacl.AssertNothingRefused(t, admin, srv.Username)
		assertNoScripts(t, admin, srv.Username, srv.Password)
	})
	t.Run("cluster", func(t *testing.T) {
		admin := cluster(t)
		user, pass := redisacl.ClusterUser(t, admin, "dlock-min", append(append([]string{}, rules...), "+cluster|slots")...)
		exerciseNotes(t, redis.NewClusterClient(&redis.ClusterOptions{Addrs: admin.Options().Addrs, Username: user, Password: pass}), admin)
		redisacl.AssertNothingRefused(t, admin, user)
		assertNoScripts(t, admin, user, pass)
	})
}

// exerciseNotes runs redisacl.ExerciseNotes through two Lockers over rdb.
func exerciseNotes(t *testing.T, rdb, admin redis.UniversalClient) {
	t.Cleanup(func() { rdb.Close() })
	newLocker := func() *lock.Locker {
		l := New(rdb, &Options{Options: lock.Options{TTL: time.Second}})
		t.Cleanup(func() { l.Close() })
		return l
	}
	redisacl.ExerciseNotes(t, newLocker(), newLocker(), admin, DefaultPrefix+"*:n")
}

// A waiter's note is written as it joins, so a release that hands the key
// over grants it with its note, before the waiter takes it (Check); the
// waiter's release deletes its field, and no notes hash is left.
func TestNoteHandedOver(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		d := testDriver(rdb, "")
		ctx := testCtx(t)
		k := testKey(t)
		lk := d.LockKey(k)
		a := &driver.Lease{Key: k, Owner: owner(), TTL: 10 * time.Second}
		if err := d.Acquire(ctx, a); err != nil {
			t.Fatal(err)
		}
		b := &driver.Lease{Key: k, Owner: owner(), TTL: 10 * time.Second, Note: "b's"}
		if err := d.Join(ctx, b, make(chan struct{}, 1)); !errors.Is(err, driver.ErrHeld) {
			t.Fatalf("Join of a held key: %v", err)
		}
		if err := d.Release(ctx, a); err != nil {
			t.Fatal(err)
		}
		st, err := d.Inspect(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Holders) != 1 || st.Holders[0].Owner != b.Owner || st.Holders[0].Note != "b's" {
			t.Fatalf("after the hand-over, before the waiter's Check: holders %+v; want %s with note %q", st.Holders, b.Owner, "b's")
		}
		if err := d.Check(ctx, b); err != nil {
			t.Fatalf("Check after the hand-over: %v", err)
		}
		if err := d.Release(ctx, b); err != nil {
			t.Fatal(err)
		}
		if n := rdb.Exists(ctx, notesKey(lk)).Val(); n != 0 {
			t.Errorf("the notes hash outlives the grants: %v", rdb.HGetAll(ctx, notesKey(lk)).Val())
		}
	})
}

// A waiter that leaves after a release handed it the key (an election
// campaign cancelled as its turn came) keeps its note until the release
// that passes the key on: no one sees the key held with no note (an
// observer would see a term without its announcement). The next waiter
// is handed the key with its own note, and the leaver's field is gone.
// When the handed grant expired before Leave's release (here: the key is
// deleted under its watch), the field is deleted all the same.
func TestNoteLeaveAfterHandOver(t *testing.T) {
	for _, expire := range []bool{false, true} {
		t.Run(fmt.Sprintf("expired=%v", expire), func(t *testing.T) {
			clients(t, func(t *testing.T, rdb redis.UniversalClient) {
				d, seer := testDriver(rdb, ""), testDriver(rdb, "")
				ctx := testCtx(t)
				k := testKey(t)
				lk := d.LockKey(k)
				a := &driver.Lease{Key: k, Owner: owner(), TTL: 10 * time.Second, Note: "a's"}
				if err := d.Acquire(ctx, a); err != nil {
					t.Fatal(err)
				}
				b := &driver.Lease{Key: k, Owner: owner(), TTL: 10 * time.Second, Note: "b's"}
				c := &driver.Lease{Key: k, Owner: owner(), TTL: 10 * time.Second, Note: "c's"}
				for _, w := range []*driver.Lease{b, c} {
					if err := d.Join(ctx, w, make(chan struct{}, 1)); !errors.Is(err, driver.ErrHeld) {
						t.Fatalf("Join of a held key: %v", err)
					}
				}
				if err := d.Release(ctx, a); err != nil {
					t.Fatal(err)
				}
				var seen []driver.Holder
				hook := func(op, _ string) {
					if op != "release" || seen != nil {
						return
					}
					st, err := seer.Inspect(ctx, k)
					if err != nil {
						t.Error(err)
					}
					seen = append([]driver.Holder{}, st.Holders...)
					if expire {
						rdb.Del(ctx, lk)
					}
				}
				d.beforeExec.Store(&hook)
				err := d.Leave(ctx, b)
				d.beforeExec.Store(nil)
				if err != nil {
					t.Fatalf("Leave after a hand-over: %v", err)
				}
				if len(seen) != 1 || seen[0].Owner != b.Owner || seen[0].Note != "b's" {
					t.Errorf("as Leave released the key handed to it: holders %+v; want %s with note %q", seen, b.Owner, "b's")
				}
				if rdb.HExists(ctx, notesKey(lk), b.Owner).Val() {
					t.Errorf("the leaver's note outlives its Leave: %v", rdb.HGetAll(ctx, notesKey(lk)).Val())
				}
				if expire {
					return
				}
				st, err := seer.Inspect(ctx, k)
				if err != nil {
					t.Fatal(err)
				}
				if len(st.Holders) != 1 || st.Holders[0].Owner != c.Owner || st.Holders[0].Note != "c's" {
					t.Errorf("after Leave: holders %+v; want %s with note %q", st.Holders, c.Owner, "c's")
				}
			})
		})
	}
}
