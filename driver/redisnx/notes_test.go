package redisnx

import (
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"

	"github.com/dlock-go/dlock/internal/testsupport/redisacl"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/redis/go-redis/v9"
)

// TestNotesMinimalPermissions: grant notes in every mode, renewed and
// resumed, read by Inspect and deleted with their grants, as a user with
// exactly the package doc's ACL rules.
func TestNotesMinimalPermissions(t *testing.T) {
	srv := testserver.StartRedis(t, &testserver.RedisOptions{User: "dlock-min", ACLRules: redisacl.DocRules(t, "doc.go")})
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer admin.Close()
	u := userURL(srv.Username, srv.Password, []string{srv.Addr()})
	redisacl.ExerciseNotes(t, openURL(t, u), openURL(t, u), admin, DefaultPrefix+"*:n")
	redisacl.AssertNothingRefused(t, admin, srv.Username)
}

// openURL opens a Locker from u, closed at t's end.
func openURL(t *testing.T, u string) *lock.Locker {
	t.Helper()
	l, err := lock.Open(tctx(t, 10*time.Second), u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}
