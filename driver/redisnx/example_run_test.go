package redisnx_test

import (
	"io"
	"os"
	"regexp"
	"testing"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
)

// TestExamples runs the README's quick start (Example, Example_open)
// against the shared test server, through the environment variables the
// examples read, and checks what they print. internal/testsupport/doccheck checks that
// the README shows their code.
func TestExamples(t *testing.T) {
	addr := testserver.SharedRedis(t).Addr()
	t.Setenv("REDIS_ADDR", addr)
	t.Setenv("DLOCK_URL", "redisnx://"+addr)
	for _, ex := range []struct {
		name string
		run  func()
		want string
	}{
		{"Example", Example, `^holding orders/42 with token [1-9][0-9]*\nwriting the nightly report with token [1-9][0-9]*\n$`},
		{"Example_open", Example_open, `^holding orders/42 with token [1-9][0-9]*\n$`},
	} {
		out := stdoutOf(t, ex.run)
		if !regexp.MustCompile(ex.want).MatchString(out) {
			t.Errorf("%s printed %q, want a match of %q", ex.name, out, ex.want)
		}
	}
}

// stdoutOf runs f and returns what it wrote to os.Stdout.
func stdoutOf(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stdout
	os.Stdout = w
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	defer func() { os.Stdout = saved }()
	f()
	w.Close()
	return <-done
}
