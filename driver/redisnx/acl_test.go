package redisnx

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/dlock-go/dlock/internal/testsupport/redisacl"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// The permits of a semaphore work as a user allowed only the rules of the
// package doc, on one server and on a Cluster (plus +cluster|slots): see
// redisacl.ExercisePermits for what is done; and no node's ACL LOG shows a
// refusal on the way. (internal/testsupport/redismix's TestMinimalPermissions checks
// the other operations with the same rules.)
func TestMinimalPermissionsPermits(t *testing.T) {
	rules := redisacl.DocRules(t, "doc.go")
	t.Run("standalone", func(t *testing.T) {
		srv := testserver.StartRedis(t, &testserver.RedisOptions{User: "dlock-min", ACLRules: rules})
		admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		defer admin.Close()
		exercisePermits(t, admin, userURL(srv.Username, srv.Password, []string{srv.Addr()}))
		redisacl.AssertNothingRefused(t, admin, srv.Username)
	})
	t.Run("cluster", func(t *testing.T) {
		admin := sharedCluster(t)
		user, pass := redisacl.ClusterUser(t, admin, "dlock-acl", append(append([]string{}, rules...), "+cluster|slots")...)
		exercisePermits(t, admin, userURL(user, pass, admin.Options().Addrs))
		redisacl.AssertNothingRefused(t, admin, user)
	})
}

func userURL(user, pass string, addrs []string) string {
	u := url.URL{Scheme: Scheme, User: url.UserPassword(user, pass), Host: strings.Join(addrs, ",")}
	return u.String()
}

// exercisePermits runs redisacl.ExercisePermits through Lockers opened
// from u; admin, a client of the default user, watches the queue.
func exercisePermits(t *testing.T, admin redis.UniversalClient, u string) {
	open := func(u string) *lock.Locker {
		l, err := lock.Open(tctx(t, 10*time.Second), u)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return sem(t, l)
	}
	queued := func(k string) { waitQueued(t, admin, redisx.LockKey(DefaultPrefix, k), 1) }
	redisacl.ExercisePermits(t, open(u+"?ttl=300ms"), open(u), queued)
}
