package rediswatch

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// scriptlessUser makes an ACL user denied @scripting on every master of
// the Cluster behind admin, deleted at cleanup, and returns its name and
// password.
func scriptlessUser(t *testing.T, admin *redis.ClusterClient) (user, pass string) {
	t.Helper()
	user, pass = "dlock-rediswatch-"+randHex(4), randHex(12)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := admin.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		return node.ACLSetUser(ctx, user, "reset", "on", ">"+pass, "~*", "&*", "+@all", "-@scripting").Err()
	})
	if err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		admin.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			return node.ACLDelUser(ctx, user).Err()
		})
	})
	return user, pass
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// scriptCommands are the commandstats entries of every way to run a script.
var scriptCommands = []string{"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro", "script|load", "script|exists", "function|load"}

// assertNoScripts proves that user never had a command refused on any
// node (every script command is refused to it, so ACL LOG would list any
// attempt), that no script ran on them at all (INFO commandstats; these
// servers serve this test binary only), and that the user really is
// denied scripts, so that the suite's passing means something.
func assertNoScripts(t *testing.T, admin redis.UniversalClient, user, pass string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	check := func(ctx context.Context, node *redis.Client) error {
		addr := node.Options().Addr
		entries, err := node.ACLLog(ctx, 1000).Result()
		if err != nil {
			t.Errorf("%s: ACL LOG: %v", addr, err)
		}
		for _, e := range entries {
			if e.Username == user {
				t.Errorf("%s: the driver's user had %q refused (%s) %d time(s)", addr, e.Object, e.Reason, e.Count)
			}
		}
		stats, err := node.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Errorf("%s: INFO commandstats: %v", addr, err)
		}
		for _, line := range strings.Split(stats, "\n") {
			for _, c := range scriptCommands {
				// Refused calls (rejected_calls=) are in ACL LOG; a call that
				// ran at all has calls= above zero.
				if strings.HasPrefix(line, "cmdstat_"+c+":") && !strings.HasPrefix(line, "cmdstat_"+c+":calls=0,") {
					t.Errorf("%s: a script ran: %s", addr, strings.TrimSpace(line))
				}
			}
		}
		// The user is denied scripts: EVAL fails with NOPERM.
		opt := *node.Options()
		opt.Username, opt.Password = user, pass
		uc := redis.NewClient(&opt)
		defer uc.Close()
		if err := uc.Eval(ctx, "return 1", nil).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("%s: EVAL as %s: err = %v, want NOPERM: the user is not denied scripts", addr, user, err)
		}
		return nil
	}
	var err error
	switch c := admin.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, check)
	case *redis.Client:
		err = check(ctx, c)
	}
	if err != nil {
		t.Errorf("checking for scripts: %v", err)
	}
}
