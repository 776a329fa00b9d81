package leakcheck

import (
	"strings"
	"testing"
	"time"
)

// The check has teeth: a goroutine started after the snapshot and still
// blocked is reported, with its stack; once it exits, nothing is.
func TestFindsLeak(t *testing.T) {
	base := Take()
	stop := make(chan struct{})
	go leaky(stop)
	err := Check(base)
	if err == nil || !strings.Contains(err.Error(), "leakcheck.leaky") {
		t.Fatalf("Check = %v, want the leaked goroutine in leakcheck.leaky", err)
	}
	if err := Check(base, Ignore("github.com/dlock-go/dlock/internal/testsupport/leakcheck.leaky")); err != nil {
		t.Errorf("Check with leaky ignored = %v", err)
	}
	close(stop)
	if err := Check(base); err != nil {
		t.Errorf("after the goroutine exited: %v", err)
	}
}

// A goroutine that exits within the retry window is no leak.
func TestWaitsForExit(t *testing.T) {
	base := Take()
	stop := make(chan struct{})
	go leaky(stop)
	time.AfterFunc(200*time.Millisecond, func() { close(stop) })
	if err := Check(base); err != nil {
		t.Errorf("Check = %v, want nil once the goroutine exits", err)
	}
}

// Goroutines alive at the snapshot, and the caller itself, are not leaks.
func TestBaseAndSelf(t *testing.T) {
	stop := make(chan struct{})
	defer close(stop)
	go leaky(stop)
	time.Sleep(10 * time.Millisecond)
	if err := Check(Take()); err != nil {
		t.Errorf("Check = %v", err)
	}
}

func TestParse(t *testing.T) {
	g, ok := parse("goroutine 7 [chan receive, 1 minutes]:\n" +
		"example.com/p.(*T).wait(0xc000010000)\n\t/src/p/t.go:12 +0x2a\n" +
		"created by example.com/p.Start in goroutine 1\n\t/src/p/t.go:5 +0x3c")
	if !ok || g.id != 7 || g.state != "chan receive, 1 minutes" ||
		len(g.funcs) != 1 || g.funcs[0] != "example.com/p.(*T).wait" || g.creator != "example.com/p.Start" {
		t.Errorf("parse = %+v, %v", g, ok)
	}
}

func leaky(stop chan struct{}) { <-stop }

// TestAudit38StarvedWaitIsLonger: on a machine where every sleep comes
// back 100 ms late, Check waits that much longer for goroutines to exit:
// one that exits 3 s after Check began (under 2 s of the time Check got to
// run) is no leak; without the lateness counted, it was reported at 2 s.
func TestAudit38StarvedWaitIsLonger(t *testing.T) {
	sleep = func(d time.Duration) { time.Sleep(d + 100*time.Millisecond) }
	defer func() { sleep = time.Sleep }()
	base := Take()
	stop := make(chan struct{})
	go leaky(stop)
	time.AfterFunc(3*time.Second, func() { close(stop) })
	if err := Check(base); err != nil {
		t.Errorf("Check on a starved machine = %v, want nil once the goroutine exits", err)
	}
}
