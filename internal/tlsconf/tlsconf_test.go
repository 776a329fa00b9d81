package tlsconf

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
)

func files(t *testing.T) *testserver.TLS {
	t.Helper()
	f, err := testserver.NewTLSFiles(t.TempDir(), testserver.TLSOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func query(pairs ...string) url.Values {
	q := url.Values{}
	for i := 0; i < len(pairs); i += 2 {
		q.Add(pairs[i], pairs[i+1])
	}
	return q
}

func TestParse(t *testing.T) {
	f := files(t)
	if c, err := Parse(query("prefix", "x"), "u"); c != nil || err != nil {
		t.Fatalf("no TLS parameter: %v, %v; want nil, nil", c, err)
	}
	c, err := Parse(query(CA, f.CAFile, Cert, f.CertFile, Key, f.KeyFile, ServerName, "db.example"), "u")
	if err != nil {
		t.Fatal(err)
	}
	if c.RootCAs == nil || len(c.Certificates) != 1 || c.ServerName != "db.example" || c.InsecureSkipVerify || c.MinVersion != tls.VersionTLS12 {
		t.Errorf("config not as the parameters say: RootCAs set %v, %d certificates, ServerName %q, InsecureSkipVerify %v, MinVersion %#x",
			c.RootCAs != nil, len(c.Certificates), c.ServerName, c.InsecureSkipVerify, c.MinVersion)
	}
	c, err = Parse(query(InsecureSkipVerify, "true"), "u")
	if err != nil || !c.InsecureSkipVerify || c.RootCAs != nil || c.Certificates != nil {
		t.Errorf("tls_insecure_skip_verify=true: %+v, %v", c, err)
	}
	c, err = Parse(query(InsecureSkipVerify, "false"), "u")
	if err != nil || c == nil || c.InsecureSkipVerify {
		t.Errorf("tls_insecure_skip_verify=false turns TLS on, verified: %+v, %v", c, err)
	}
}

func TestParseRefuses(t *testing.T) {
	f := files(t)
	missing := filepath.Join(t.TempDir(), "nope.pem")
	for _, tc := range []struct {
		q    url.Values
		want string
	}{
		{query(CA, missing), "tls_ca: open " + missing},
		{query(CA, f.KeyFile), "no PEM certificate"},
		{query(CA, ""), "tls_ca is empty"},
		{query(Cert, f.CertFile), "tls_cert without tls_key"},
		{query(Key, f.KeyFile), "tls_key without tls_cert"},
		{query(Cert, f.CertFile, Key, missing), "tls_key: open " + missing},
		{query(Cert, missing, Key, f.KeyFile), "tls_cert: open " + missing},
		{query(Cert, f.CertFile, Key, f.CAFile), "tls_cert=" + fmt.Sprintf("%q", f.CertFile)},
		{query(InsecureSkipVerify, "yes please"), `tls_insecure_skip_verify="yes please": want true or false`},
		{query(InsecureSkipVerify, "true", CA, f.CAFile), "leaves tls_ca unused"},
		{query(ServerName, "a", ServerName, "b"), "given 2 times"},
	} {
		c, err := Parse(tc.q, `test URL "x"`)
		if c != nil || !errors.Is(err, lock.ErrInvalid) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `test URL "x"`) {
			t.Errorf("%v: %v, %v; want ErrInvalid saying %q", tc.q, c, err, tc.want)
		}
	}
}

func TestFailed(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{io.EOF, false},
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, false},
		{fmt.Errorf("x: %w", &tls.CertificateVerificationError{Err: errors.New("x509: unknown authority")}), true},
		{tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}, true},
		{&net.OpError{Op: "remote error", Err: errors.New("tls: certificate required")}, true},
		{tls.AlertError(42), true},
	} {
		if got := Failed(tc.err); got != tc.want {
			t.Errorf("Failed(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
