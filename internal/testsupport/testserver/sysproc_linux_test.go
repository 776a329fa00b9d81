package testserver

import (
	"os/exec"
	"testing"
	"time"
)

// TestWaitStoppedZombie: a process that has exited and is not yet reaped
// (a PostgreSQL backend whose postmaster is paused) cannot answer, so
// waitStopped returns at once for it rather than at its timeout.
func TestWaitStoppedZombie(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	pid := cmd.Process.Pid
	for deadline := time.Now().Add(5 * time.Second); processAlive(pid); {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still running after 5s", pid)
		}
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	if err := waitStopped(pid, 2*time.Second); err != nil {
		t.Fatalf("waitStopped on the zombie %d: %v", pid, err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("waitStopped on the zombie %d took %v", pid, d)
	}
}
