package main

import (
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testserver"
)

// TestDemoStartServersNeedsTag: the binary users build cannot start
// servers, and says how to get one that can.
func TestDemoStartServersNeedsTag(t *testing.T) {
	r := runDlock(t, "", "", "demo", "-start-servers")
	if r.code != exitUsage || !strings.Contains(r.stderr, "-tags demoservers") {
		t.Errorf("%v", r)
	}
}

// TestDemoStartServers runs what make demo runs, shorter: every compiled-in
// network backend must get a table row with grants, no overlaps and
// monotonic tokens, and the servers the demo started must be gone after it.
// Only a server that is not installed here (testserver cannot have one,
// and the demo says "not installed") may go without a row; one that is
// installed and fails to start fails the test.
func TestDemoStartServers(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the demo starts real servers")
	}
	bin, err := demoBin()
	if err != nil {
		t.Fatal(err)
	}
	cmd := dlockCmd(t, "", "", "demo", "-start-servers", "-duration", "800ms", "-workers", "3", "-keys", "2")
	cmd.Path, cmd.Args[0] = bin, bin
	out := &lockedWriter{}
	cmd.Stdout = out
	r := finish(t, cmd, start(t, cmd))
	text := out.String()
	if r.code != 0 {
		t.Fatalf("%v\nstdout:\n%s", r, text)
	}
	rows := map[string][]string{}
	for _, line := range strings.Split(text, "\n") {
		if f := strings.Fields(line); len(f) == 9 {
			rows[f[0]] = f
		}
	}
	for _, b := range compiledIn() {
		row, ok := rows[b.scheme]
		if !ok {
			missing := testserver.Available(testserver.Kind(b.server))
			if missing != nil && strings.Contains(text, string(b.server)+" not installed") {
				t.Logf("%s skipped: its server is not installed here (%v)", b.scheme, missing)
				continue
			}
			t.Errorf("no table row for %s (its server installed: %v) in:\n%s", b.scheme, missing == nil, text)
			continue
		}
		// backend grants grants/s overlaps tokens p50 p99 lost errors
		if row[1] == "0" || row[3] != "0" || row[4] != "monotonic" || row[7] != "0" || row[8] != "0" {
			t.Errorf("%s: %v", b.scheme, row)
		}
	}
	if strings.Contains(text, "failed to start") {
		t.Errorf("a server failed to start:\n%s", text)
	}
	if !strings.Contains(text, "no overlapping grants") {
		t.Errorf("no verdict in:\n%s", text)
	}
	for _, m := range regexp.MustCompile(`started \w+ +on (\S+)`).FindAllStringSubmatch(text, -1) {
		if c, err := net.DialTimeout("tcp", m[1], time.Second); err == nil {
			c.Close()
			t.Errorf("a server the demo started still answers on %s", m[1])
		}
	}
}
