package redisx_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver/redisnx"
	_ "github.com/dlock-go/dlock/driver/rediswatch"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// TestGoRedisLogs runs lockers against closed ports in a child process and
// reads its stderr: the go-redis lines of clients dlock built from a URL
// go to Options.Logger (or nowhere), never to stderr, while those of
// clients the program built, passed to New or not, are printed as
// go-redis prints them.
func TestGoRedisLogs(t *testing.T) {
	if os.Getenv("DLOCK_GOREDIS_LOG_CHILD") != "" {
		goRedisLogChild(t)
		return
	}
	ports := map[string]string{}
	for _, p := range []string{"logged", "silent", "user", "cluster", "cluster2"} {
		ports[p] = closedPort(t)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestGoRedisLogs$", "-test.v")
	cmd.Env = append(os.Environ(), "DLOCK_GOREDIS_LOG_CHILD=1",
		"PORT_LOGGED="+ports["logged"], "PORT_SILENT="+ports["silent"], "PORT_USER="+ports["user"],
		"PORT_CLUSTER="+ports["cluster"], "PORT_CLUSTER2="+ports["cluster2"])
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("child: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	for _, p := range []string{"logged", "silent", "cluster", "cluster2"} {
		if strings.Contains(stderr.String(), ":"+ports[p]) {
			t.Errorf("stderr has go-redis lines of the %s Locker opened by URL (port %s):\n%s", p, ports[p], stderr.String())
		}
	}
	if !strings.Contains(stderr.String(), ":"+ports["user"]) {
		t.Errorf("stderr lacks the go-redis lines of the program's own clients (port %s): dlock silenced them:\n%s", ports["user"], stderr.String())
	}
	logged := stdout.String()
	if !strings.Contains(logged, `msg="dlock: redis client"`) || !strings.Contains(logged, ":"+ports["logged"]) {
		t.Errorf("Options.Logger got no go-redis line of its client (port %s):\n%s", ports["logged"], logged)
	}
	if strings.Contains(logged, ":"+ports["silent"]) || strings.Contains(logged, ":"+ports["user"]) {
		t.Errorf("Options.Logger got another client's lines:\n%s", logged)
	}
}

// goRedisLogChild is the child's part: every client fails to dial.
func goRedisLogChild(t *testing.T) {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// Both drivers build their clients here: one of each is enough.
	lockOnce(t, "redisnx://127.0.0.1:"+os.Getenv("PORT_LOGGED"), &lock.Options{Logger: logger})
	lockOnce(t, "rediswatch://127.0.0.1:"+os.Getenv("PORT_SILENT"), nil)
	lockOnce(t, "redisnx://127.0.0.1:"+os.Getenv("PORT_CLUSTER")+",127.0.0.1:"+os.Getenv("PORT_CLUSTER2"), nil)
	user := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + os.Getenv("PORT_USER")})
	defer user.Close()
	l := redisnx.New(user, nil)
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	if _, err := l.Lock(ctx, "k"); err == nil {
		t.Error("Lock on a closed port succeeded")
	}
	_ = user.Ping(ctx).Err()
}

func lockOnce(t *testing.T, url string, o *lock.Options) {
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	l, err := lock.OpenWith(ctx, url, o)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Lock(ctx, "k"); err == nil {
		t.Errorf("%s: Lock on a closed port succeeded", url)
	}
}

// closedPort returns a loopback port nothing listens on.
func closedPort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	ln.Close()
	return fmt.Sprint(port)
}
