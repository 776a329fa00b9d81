package testserver

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}

func zkConnect(t *testing.T, addrs []string) *zk.Conn {
	t.Helper()
	c, _, err := zk.Connect(addrs, 2*time.Second, zk.WithLogger(quietLogger{}), zk.WithLogInfo(false))
	must(t, err)
	t.Cleanup(c.Close)
	return c
}

func fourLetter(addr, cmd string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return textDo(ctx, addr, cmd, nil)
}

func TestZooKeeper(t *testing.T) {
	t.Parallel()
	z := StartZooKeeper(t, nil)
	z.RequireFaults(t)
	if r, err := fourLetter(z.Addr(), "ruok", time.Second); err != nil || r != "imok" {
		t.Fatalf("ruok: %q, %v", r, err)
	}
	if i, err := z.Leader(); err != nil || i != 0 {
		t.Fatalf("Leader of standalone server: %d, %v", i, err)
	}
	c := zkConnect(t, z.Addrs())
	_, err := c.Create("/kept", []byte("v"), 0, zk.WorldACL(zk.PermAll))
	must(t, err)

	must(t, z.Pause())
	if _, err := fourLetter(z.Addr(), "ruok", 300*time.Millisecond); !isTimeout(err) {
		t.Fatalf("ruok while paused: got %v, want a timeout", err)
	}
	must(t, z.Resume())
	if r, err := fourLetter(z.Addr(), "ruok", time.Second); err != nil || r != "imok" {
		t.Fatalf("ruok after resume: %q, %v", r, err)
	}

	must(t, z.Kill())
	requireRefused(t, z.Addr())
	must(t, z.Restart())
	c2 := zkConnect(t, z.Addrs())
	if v, _, err := c2.Get("/kept"); err != nil || string(v) != "v" {
		t.Fatalf("get /kept after restart: %q, %v", v, err)
	}
}

func TestZooKeeperEnsemble(t *testing.T) {
	t.Parallel()
	z := StartZooKeeperEnsemble(t, nil)
	z.RequireFaults(t)
	if len(z.Addrs()) != 3 {
		t.Fatalf("addrs %v, want 3", z.Addrs())
	}
	c := zkConnect(t, z.Addrs())
	_, err := c.Create("/before", []byte("v"), 0, zk.WorldACL(zk.PermAll))
	must(t, err)

	old, err := z.KillLeader()
	must(t, err)
	requireRefused(t, z.Node(old).Addr())
	now, err := z.WaitLeader(30 * time.Second)
	must(t, err)
	if now == old {
		t.Fatalf("leader %d after killing leader %d", now, old)
	}
	// The client fails over to a live server and sees earlier writes.
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err = c.Create("/after", nil, 0, zk.WorldACL(zk.PermAll))
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	must(t, err)
	if v, _, err := c.Get("/before"); err != nil || string(v) != "v" {
		t.Fatalf("get /before after leader change: %q, %v", v, err)
	}

	must(t, z.Node(old).Restart())
	mode, err := zkMode(context.Background(), z.Node(old).Addr())
	if err != nil || mode != "follower" {
		t.Fatalf("restarted node: mode %q, %v; want follower", mode, err)
	}
}

func TestSharedZooKeeper(t *testing.T) {
	t.Parallel()
	z := SharedZooKeeper(t)
	c := zkConnect(t, z.Addrs())
	if _, _, err := c.Exists("/"); err != nil {
		t.Fatal(err)
	}
	if err := z.Restart(); !errors.Is(err, ErrNoFaults) {
		t.Fatalf("Restart on shared instance: got %v, want ErrNoFaults", err)
	}

	// Empty container nodes are removed within seconds (checkIntervalMs=1000).
	acl := zk.WorldACL(zk.PermAll)
	_, err := c.CreateContainer("/container-test", nil, zk.FlagContainer, acl)
	must(t, err)
	_, err = c.Create("/container-test/child", nil, 0, acl)
	must(t, err)
	must(t, c.Delete("/container-test/child", -1))
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok, _, err := c.Exists("/container-test")
		must(t, err)
		if !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("empty container node still there after 10s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
