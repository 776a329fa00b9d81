package rediswatch

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/redisacl"
	"github.com/redis/go-redis/v9"
)

// scriptCommands are the commandstats entries of every way to run a script.
var scriptCommands = []string{"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro", "script|load", "script|exists", "function|load"}

// assertNoScripts proves that user never had a command refused on any
// node (every script command is refused to it, so ACL LOG would list any
// attempt), that no script ran on them at all (INFO commandstats; these
// servers serve this test binary only), and that the user really is
// denied scripts, so that the suite's passing means something.
func assertNoScripts(t *testing.T, admin redis.UniversalClient, user, pass string) {
	t.Helper()
	redisacl.AssertNothingRefused(t, admin, user)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	redisacl.ForEachNode(t, ctx, admin, func(ctx context.Context, node *redis.Client) error {
		addr := node.Options().Addr
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
	})
}
