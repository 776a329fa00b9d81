package testserver

import (
	"testing"
	"time"
)

// TestEtcdCluster starts a three-member cluster, finds its leader, kills
// it, sees another elected, and restarts the killed member.
func TestEtcdCluster(t *testing.T) {
	e := StartEtcdCluster(t, nil)
	e.RequireFaults(t)
	if len(e.Nodes) != 3 {
		t.Fatalf("%d members, want 3", len(e.Nodes))
	}
	i, err := e.WaitLeader(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Node(i).Kill(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		j, err := e.Leader()
		if err == nil && j != i {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new leader after killing member %d: %v", i, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := e.Node(i).Restart(); err != nil {
		t.Fatal(err)
	}
	if err := etcdHealthy(t.Context(), e.Node(i).Addr(), nil); err != nil {
		t.Fatal(err)
	}
}
