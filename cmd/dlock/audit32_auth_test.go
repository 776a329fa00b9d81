package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestAudit32AuthURL: with an etcd:// URL that carries a password, dlock
// run and inspect never print it (help, -v logs, errors, inspect's
// output); a wrong password and an unreachable member end with the
// backend status and say why; the right one runs the command.
func TestAudit32AuthURL(t *testing.T) {
	e := testserver.StartEtcd(t, nil)
	const prefix = "audit32/"
	c, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i, step := range []func() error{
		func() error { _, err := c.UserAdd(ctx, "root", "R00tSecret"); return err },
		func() error { _, err := c.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := c.RoleAdd(ctx, "app"); return err },
		func() error {
			_, err := c.RoleGrantPermission(ctx, "app", prefix, clientv3.GetPrefixRangeEnd(prefix), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := c.UserAdd(ctx, "app", "S3cret/PW"); return err },
		func() error { _, err := c.UserGrantRole(ctx, "app", "app"); return err },
		func() error { _, err := c.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatalf("auth setup step %d: %v", i, err)
		}
	}
	good := "etcd://app:S3cret%2FPW@" + e.Addr() + "/" + prefix
	bad := "etcd://app:Wr0ngSecret@" + e.Addr() + "/" + prefix
	down := "etcd://app:Wr0ngSecret@127.0.0.1:1/" + prefix
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"run", "-v", "-url", good, "k", "--", "echo", "ran"}, exitOK, "ran"},
		{[]string{"inspect", "-v", "-url", good, "k"}, exitConflict, "free"},
		{[]string{"inspect", "-json", "-url", good, "k"}, exitConflict, `"held": false`},
		{[]string{"run", "-v", "-url", bad, "k", "--", "echo", "ran"}, exitBackend, "authentication failed"},
		{[]string{"run", "-n", "-url", bad, "k", "--", "echo", "ran"}, exitBackend, "authentication failed"},
		{[]string{"inspect", "-url", bad, "k"}, exitBackend, "authentication failed"},
		{[]string{"run", "-url", down, "k", "--", "echo", "ran"}, exitBackend, "connection refused"},
		{[]string{"run", "-h", "-url", bad}, exitOK, "backend URL"},
	} {
		r := dlock(t, c.args...)
		out := r.stdout + r.stderr
		t.Logf("dlock %s: exit %d\n%s", strings.Join(c.args, " "), r.code, out)
		if r.code != c.code || !strings.Contains(out, c.want) {
			t.Errorf("dlock %s: %v\nwant exit %d and %q", strings.Join(c.args, " "), r, c.code, c.want)
		}
		for _, pw := range []string{"S3cret", "Wr0ngSecret"} {
			if strings.Contains(out, pw) {
				t.Errorf("dlock %s printed the password %q", strings.Join(c.args, " "), pw)
			}
		}
		if c.code == exitBackend && r.stdout != "" {
			t.Errorf("dlock %s ran the command", strings.Join(c.args, " "))
		}
	}
}
