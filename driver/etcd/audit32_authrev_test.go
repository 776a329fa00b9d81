package etcd

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestAudit32AuthChurn: root changes users' roles all the while (each
// change moves etcd's auth revision, so a request checked before it and
// applied after it is refused with ErrAuthOldRevision, and sent again
// by the log-in) while two URL Lockers of app contend for one key: no
// two holders at once, every call succeeds, nothing is left behind, and
// the Lockers do not log in again for those refusals.
func TestAudit32AuthChurn(t *testing.T) {
	prefix := fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())
	e := authEtcd(t, prefix)
	root := userClient(t, e.Endpoints(), "root", "rootpw", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	url := fmt.Sprintf("etcd://app:apppw@%s/%s?ttl=5s", e.Addr(), prefix)
	stop := make(chan struct{})
	var churn sync.WaitGroup
	churn.Add(1)
	changes := 0
	go func() {
		defer churn.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if _, err := root.UserGrantRole(ctx, "nobody", "reader"); err != nil {
				t.Errorf("grant: %v", err)
				return
			}
			if _, err := root.UserRevokeRole(ctx, "nobody", "reader"); err != nil {
				t.Errorf("revoke: %v", err)
				return
			}
			changes += 2
		}
	}()
	var inside, grants, failures atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(8 * time.Second)
	for w := range 2 {
		l, err := lock.Open(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		for g := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(deadline) {
					cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
					lease, err := l.Lock(cctx, "churn")
					ccancel()
					if err != nil {
						failures.Add(1)
						t.Logf("locker %d/%d: Lock: %v", w, g, err)
						continue
					}
					if inside.Add(1) != 1 {
						t.Errorf("two holders at once")
					}
					grants.Add(1)
					time.Sleep(time.Millisecond)
					inside.Add(-1)
					if err := lease.Unlock(ctx); err != nil {
						failures.Add(1)
						t.Logf("locker %d/%d: Unlock: %v", w, g, err)
					}
				}
			}()
		}
	}
	wg.Wait()
	close(stop)
	churn.Wait()
	logins := authenticates(t, e.Addr())
	t.Logf("%d grants, %d failed calls, %d auth changes, %d log-ins", grants.Load(), failures.Load(), changes, logins)
	// A call may still time out now and then under this churn (2 of 271
	// did once under -race: etcd redoes a log-in's password check while
	// the store moves); without the resend, calls failed in runs of 5 s.
	if calls := grants.Load() + failures.Load(); failures.Load()*50 > calls {
		t.Errorf("%d of %d calls failed while the auth revision moved (over 2%%)", failures.Load(), calls)
	}
	// One log-in per Locker and root's: a request refused for an older
	// auth revision is sent again with its simple token, which is still
	// good. A log-in for each such refusal took seconds (etcd checks the
	// password again while the store changes under its check), and held
	// up every call of its Locker.
	// 3 to 8 are counted here (under -race too); a log-in for each of the
	// ~150 refusals would pass 15 unless each took seconds, as etcd's do
	// while the store moves (without the resend: 7 to 13, so this bound
	// alone does not catch that; the failed calls above did).
	if logins > 15 {
		t.Errorf("%d log-ins; want one per client (a few more at most)", logins)
	}
	time.Sleep(500 * time.Millisecond)
	resp, err := root.Get(ctx, MutexPrefix(prefix, "churn")+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		t.Errorf("left behind: %s = %q", kv.Key, kv.Value)
	}
}
