package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
)

// inspectDlock runs dlock inspect ARGS and returns how it ended and its
// standard output.
func inspectDlock(t *testing.T, args ...string) (result, string) {
	t.Helper()
	cmd := dlockCmd(t, "", "", append([]string{"inspect"}, args...)...)
	out := &lockedWriter{}
	cmd.Stdout = out
	r := finish(t, cmd, start(t, cmd))
	return r, out.String()
}

// TestInspect: dlock inspect shows the holder of a key that another dlock
// process holds on a real server (redisnx), with its fencing token, and
// the dlock process queued behind it; -json says the same; once both are
// done the key is free (exit 1), and nothing it did kept anyone waiting.
func TestInspect(t *testing.T) {
	url := "redisnx://" + testserver.StartRedis(t, nil).Addr()
	dir := t.TempDir()
	const key = "jobs/inspected"
	holder := dlockCmd(t, "hold", dir, "run", "-url", url, "-ttl", "10s", key, "--", self(t))
	hs := start(t, holder)
	token := strings.TrimSpace(waitFile(t, filepath.Join(dir, "ready"), 15*time.Second))
	waiter := dlockCmd(t, "ran", dir, "run", "-url", url, key, "--", self(t))
	ws := start(t, waiter)

	// The waiter queues as soon as it has subscribed: wait for its line.
	var r result
	var out string
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		r, out = inspectDlock(t, "-url", url, key)
		if strings.Contains(out, "\nwaiter") || time.Now().After(deadline) {
			break
		}
	}
	if r.code != exitOK {
		t.Fatalf("dlock inspect of a held key: %v\nstdout:\n%s", r, out)
	}
	t.Logf("dlock inspect:\n%s", out)
	holderLine := regexp.MustCompile(`(?m)^holder +exclusive +[0-9a-f]{32} +` + token + ` +[0-9.]+m?s +\?$`)
	waiterLine := regexp.MustCompile(`(?m)^waiter +exclusive +[0-9a-f]{32} +- +- +\d{4}-\d\d-\d\dT`)
	if !strings.Contains(out, `"jobs/inspected" on redisnx://`) || !strings.Contains(out, "held (1 holder); 1 waiter") ||
		!holderLine.MatchString(out) || !waiterLine.MatchString(out) {
		t.Errorf("dlock inspect: want the holder with token %s and the queued waiter; stdout:\n%s", token, out)
	}

	r, out = inspectDlock(t, "-url", url, "-json", key)
	var st struct {
		Key     string `json:"key"`
		Held    bool   `json:"held"`
		Holders []struct {
			Mode        string `json:"mode"`
			Owner       string `json:"owner"`
			Token       uint64 `json:"token"`
			RemainingMS *int64 `json:"remaining_ms"`
			Since       *time.Time
		} `json:"holders"`
		Waiters []struct {
			Mode  string     `json:"mode"`
			Owner string     `json:"owner"`
			Since *time.Time `json:"since"`
		} `json:"waiters"`
		Unknown []string `json:"unknown"`
	}
	t.Logf("dlock inspect -json:\n%s", out)
	if err := json.Unmarshal([]byte(out), &st); err != nil || r.code != exitOK {
		t.Fatalf("dlock inspect -json: %v (%v)\nstdout:\n%s", r, err, out)
	}
	if st.Key != key || !st.Held || len(st.Holders) != 1 || st.Holders[0].Mode != "exclusive" || token != jsonNumber(st.Holders[0].Token) ||
		st.Holders[0].RemainingMS == nil || *st.Holders[0].RemainingMS <= 0 || *st.Holders[0].RemainingMS > 10000 || st.Holders[0].Since != nil ||
		len(st.Waiters) != 1 || st.Waiters[0].Since == nil || st.Waiters[0].Owner == st.Holders[0].Owner || strings.Join(st.Unknown, ",") != "since" {
		t.Errorf("dlock inspect -json: want the holder (token %s) and the waiter; got\n%s", token, out)
	}

	if err := os.WriteFile(filepath.Join(dir, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := finish(t, holder, hs); r.code != 0 {
		t.Fatalf("holder: %v", r)
	}
	if r := finish(t, waiter, ws); r.code != 0 {
		t.Fatalf("waiter: %v", r)
	}
	ran, _ := strconv.ParseUint(strings.TrimSpace(waitFile(t, filepath.Join(dir, "ran"), time.Second)), 10, 64)
	if held, _ := strconv.ParseUint(token, 10, 64); ran <= held {
		t.Errorf("the waiter ran with token %d after the holder's %d", ran, held)
	}
	r, out = inspectDlock(t, "-url", url, key)
	if r.code != exitConflict || !strings.Contains(out, "free; 0 waiters") || strings.Contains(out, "holder") {
		t.Errorf("dlock inspect of a free key: %v\nstdout:\n%s", r, out)
	}
}

func jsonNumber(n uint64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// Usage errors exit 2 before any backend is reached, and say why.
func TestInspectUsage(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		stderr string
	}{
		{"no key", []string{"-url", "memory://"}, "missing KEY"},
		{"two keys", []string{"-url", "memory://", "a", "b"}, "one KEY"},
		{"empty key", []string{"-url", "memory://", ""}, "empty key"},
		{"no URL", []string{"-url", "", "k"}, "DLOCK_URL"},
		{"unknown scheme", []string{"-url", "nosuch://x", "k"}, "unknown URL scheme"},
		{"bad timeout", []string{"-url", "memory://", "-timeout", "0s", "k"}, "-timeout"},
		{"bad flag", []string{"-url", "memory://", "-bogus", "k"}, "bogus"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, out := inspectDlock(t, tc.args...)
			if r.code != exitUsage || !strings.Contains(r.stderr, tc.stderr) || out != "" {
				t.Errorf("%v\nstdout:\n%s\nwant exit 2 and %q on stderr", r, out, tc.stderr)
			}
		})
	}
	// memory:// holds nothing across processes: a free key, exit 1.
	if r, out := inspectDlock(t, "-url", "memory://", "k"); r.code != exitConflict || !strings.Contains(out, "free") {
		t.Errorf("a free key: %v\nstdout:\n%s", r, out)
	}
}
