package zookeeper

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/go-zookeeper/zk"
)

// A holder whose node is deleted between Inspect's exists and the get of
// its note is left out: its grant ended, and shown without its note it
// would be a leader without its announcement (an Election observer saw
// one). The deletion is made certain by reading a path that is gone.
func TestInspectNoteOfAnEndedGrant(t *testing.T) {
	servers := testserver.SharedZooKeeper(t).Addrs()
	d := newTestDriver(t, servers, nil)
	raw, _ := rawConn(t, servers, testSessionTimeout, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	base := "/dlock-inspect-note-" + newLease("k", driver.Exclusive).Owner
	if _, err := raw.Create(base, []byte("here"), 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Delete(base, -1) })
	holders := []driver.Holder{{Owner: "gone"}, {Owner: "live"}}
	got, err := d.readNotes(ctx, holders, []noteRead{{0, base + "-gone"}, {1, base}})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Owner != "live" || got[0].Note != "here" {
		t.Fatalf("holders %+v; want only the live one, with its note %q", got, "here")
	}
}
