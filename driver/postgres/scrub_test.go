package postgres

import (
	"context"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/lock"
)

// TestOpenErrorsHideShortPasswords: Open's error for a URL pgx refuses
// hides the password where pgx quotes it, and leaves the rest of the
// message readable even when the password is one letter of its words.
func TestOpenErrorsHideShortPasswords(t *testing.T) {
	for _, pw := range []string{"s3cret", "o", "on"} {
		raw := "postgres://u:" + pw + "@127.0.0.1:1/db?password=" + pw + "&connect_timeout=x"
		l, err := lock.Open(context.Background(), raw)
		if err == nil {
			l.Close()
			t.Fatalf("Open(%q) succeeded", raw)
		}
		msg := err.Error()
		if strings.Contains(msg, ":"+pw+"@") || strings.Contains(msg, "password="+pw) {
			t.Errorf("password %q: Open's error quotes it: %s", pw, msg)
		}
		if !strings.Contains(msg, "connect_timeout") {
			t.Errorf("password %q: Open's error lost its words: %s", pw, msg)
		}
	}
}
