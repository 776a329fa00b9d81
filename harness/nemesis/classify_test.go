package nemesis

import (
	"testing"

	"github.com/dlock-go/dlock/harness/chaos"
)

// rediswatch's transactions are classified as the faults aim them: a
// queued waiter's claim (driver/rediswatch claim.go: reads of the key and
// its grant record, whose reply is the grant) and its full attempt that
// extends a handed-over key are "wait-grant", so that handover-late and
// grant-held hold their replies; the waiter's leave is a "wait".
func TestClassifyRediswatchSteps(t *testing.T) {
	cmd := func(name string, args ...string) chaos.Request { return chaos.Request{Cmd: name, Args: args} }
	exec := func(q ...chaos.Request) chaos.Request { return chaos.Request{Cmd: "EXEC", Queued: q} }
	for _, c := range []struct {
		name string
		q    chaos.Request
		want string
	}{
		{"claim", exec(cmd("GET", "dlock:{k}"), cmd("PTTL", "dlock:{k}"), cmd("GET", "dlock:{k}:wg:o"), cmd("LRANGE", "dlock:{k}:wq", "0", "1")), "wait-grant"},
		{"attempt taking a handed-over key", exec(cmd("PEXPIRE", "dlock:{k}", "1000"), cmd("LREM", "dlock:{k}:wq", "0", "o"), cmd("DEL", "dlock:{k}:we:o", "dlock:{k}:wg:o")), "wait-grant"},
		{"leave", exec(cmd("GET", "dlock:{k}"), cmd("LINDEX", "dlock:{k}:wq", "0"), cmd("LREM", "dlock:{k}:wq", "0", "o"), cmd("DEL", "dlock:{k}:we:o", "dlock:{k}:wg:o")), "wait"},
	} {
		if got := classifyRESP(c.q); got != c.want {
			t.Errorf("%s: classified %q, want %q", c.name, got, c.want)
		}
	}
}

// driver/postgres's steps as the faults aim them: the plain UPDATEs of
// schema version 9 (plainSteps) grant and release as lock3 and unlock3 do.
// The chaos suite's lost-reply scenarios match the same text on the
// driver's real traffic, and fail if it no longer appears.
func TestClassifyPostgresSteps(t *testing.T) {
	for _, c := range []struct {
		sql, want string
	}{
		{"WITH r AS MATERIALIZED (SELECT 1 FROM dlock.keys y WHERE ...) UPDATE dlock.keys x SET counter = GREATEST(...)", "grant"},
		{"WITH r AS MATERIALIZED (SELECT 1 FROM dlock.keys y WHERE ...) UPDATE dlock.keys x SET holder = NULL, since = NULL", "release"},
		{"SELECT a.tok, a.retry FROM dlock.lock3($1, $2, $3)", "grant"},
		{"SELECT dlock.unlock3($1, $2, $3)", "release"},
		{"SELECT * FROM dlock.check_turn3($1)", "wait"},
	} {
		if got := classifyPG(chaos.Request{Cmd: "execute", SQL: c.sql}); got != c.want {
			t.Errorf("%.40s...: classified %q, want %q", c.sql, got, c.want)
		}
	}
}
