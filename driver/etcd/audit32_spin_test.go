package etcd

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// authenticates counts the Authenticate requests the member at addr has
// handled (its gRPC metrics).
func authenticates(t *testing.T, addr string) int {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	n := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "grpc_server_started_total{") && strings.Contains(line, `grpc_method="Authenticate"`) {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			n += int(v)
		}
	}
	return n
}

// TestAudit32WaiterRefused: a URL Locker's Lock waits behind another
// holder when the server stops taking its user: the user is deleted
// (its log-in then fails), or its role loses its rights. The wait must
// end soon with the server's refusal, not ride it out until its context
// ends, stepping every 100 ms with a log-in (a password hash on the
// server) at each step: the keep-alive of its place, which etcd does
// not check, counted as a step that went through, so the ride never
// ended.
func TestAudit32WaiterRefused(t *testing.T) {
	for _, c := range []struct {
		name, want string
		refuse     func(ctx context.Context, root *clientv3.Client, prefix string) error
	}{
		{"user deleted", "authentication failed", func(ctx context.Context, root *clientv3.Client, _ string) error {
			_, err := root.UserDelete(ctx, "app")
			return err
		}},
		{"rights revoked", "permission denied", func(ctx context.Context, root *clientv3.Client, prefix string) error {
			_, err := root.RoleRevokePermission(ctx, "app", prefix, clientv3.GetPrefixRangeEnd(prefix))
			return err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			prefix := fmt.Sprintf("dlock-test/%d/", time.Now().UnixNano())
			e := authEtcd(t, prefix)
			root := userClient(t, e.Endpoints(), "root", "rootpw", nil)
			other := authLocker(t, e, "root", "rootpw", &Options{Prefix: prefix, Options: lock.Options{TTL: 30 * time.Second}})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			hl, err := other.Lock(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			defer hl.Unlock(ctx)
			l, err := lock.Open(ctx, fmt.Sprintf("etcd://app:apppw@%s/%s?ttl=5s", e.Addr(), prefix))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			done := make(chan error, 1)
			go func() {
				wctx, wcancel := context.WithTimeout(ctx, 8*time.Second)
				defer wcancel()
				_, err := l.Lock(wctx, "k")
				done <- err
			}()
			time.Sleep(time.Second) // queued
			before := authenticates(t, e.Addr())
			if err := c.refuse(ctx, root, prefix); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			err = <-done
			took := time.Since(start)
			n := authenticates(t, e.Addr()) - before
			t.Logf("Lock ended %v after the refusal: %v; %d log-ins meanwhile", took.Round(time.Millisecond), err, n)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("the wait ended with %v, want the server's refusal (%q)", err, c.want)
			}
			if took > 3*time.Second {
				t.Errorf("the wait ended %v after the server refused its user, want within 3 s", took)
			}
			if n > 5 {
				t.Errorf("%d log-ins while the wait rode out a refusal", n)
			}
		})
	}
}
