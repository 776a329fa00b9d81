// Package tlsconf is the TLS part of every driver's URL, written once: the
// query parameter names, their parsing, the loading of the PEM files they
// name into a *tls.Config, and the errors. Every driver package may import
// it (it imports only lock), so the drivers agree on names and meaning:
//
//	tls_ca=FILE                     PEM CA certificates that verify the servers
//	                                (the system's roots when absent)
//	tls_cert=FILE, tls_key=FILE     a PEM client certificate and its key, both or neither
//	tls_server_name=NAME            the name sent as SNI and verified in the
//	                                server's certificate (default: each server's host)
//	tls_insecure_skip_verify=BOOL   true skips verifying the server's certificate:
//	                                for tests only
//
// Any of them turns TLS on (Redis: also the TLS schemes and tls=true).
// The files are read by Parse, so a missing or unreadable file, a CA file
// without a certificate, a certificate without its key (or a key that does
// not match it), an empty value or a bad boolean is an error wrapping
// lock.ErrInvalid before any connection is made.
package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"

	"github.com/dlock-go/dlock/internal/errtext"
	"github.com/dlock-go/dlock/lock"
)

// The parameter names.
const (
	CA                 = "tls_ca"
	Cert               = "tls_cert"
	Key                = "tls_key"
	ServerName         = "tls_server_name"
	InsecureSkipVerify = "tls_insecure_skip_verify"
)

// Params are the TLS parameters, for lock.URLOptions and error messages.
var Params = []string{CA, Cert, Key, ServerName, InsecureSkipVerify}

// Given reports whether q has any TLS parameter.
func Given(q url.Values) bool {
	for _, p := range Params {
		if q.Has(p) {
			return true
		}
	}
	return false
}

// Parse returns the client *tls.Config the TLS parameters of q describe,
// or nil when q has none; other parameters are ignored. where names the
// URL for error messages (e.g. `memcached URL "memcached://h:1?..."`).
// Errors wrap lock.ErrInvalid.
//
// The config has MinVersion TLS 1.2, RootCAs from tls_ca (nil: the
// system's roots), Certificates from tls_cert and tls_key, ServerName
// from tls_server_name ("" lets the dialer use the host it dials) and
// InsecureSkipVerify from tls_insecure_skip_verify.
func Parse(q url.Values, where string) (*tls.Config, error) {
	if !Given(q) {
		return nil, nil
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", lock.ErrInvalid, where, fmt.Sprintf(format, args...))
	}
	for _, p := range Params {
		if vs, ok := q[p]; ok {
			if len(vs) != 1 {
				return nil, bad("parameter %s given %d times", p, len(vs))
			}
			if vs[0] == "" {
				return nil, bad("%s is empty (leave the parameter out for the default)", p)
			}
		}
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: q.Get(ServerName)}
	if v := q.Get(InsecureSkipVerify); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, bad("%s=%s: want true or false", InsecureSkipVerify, errtext.Quote(v))
		}
		c.InsecureSkipVerify = b
	}
	if c.InsecureSkipVerify && q.Has(CA) {
		return nil, bad("%s=true leaves %s unused: give one of them", InsecureSkipVerify, CA)
	}
	if f := q.Get(CA); f != "" {
		pem, err := os.ReadFile(f)
		if err != nil {
			return nil, bad("%s: %v", CA, err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, bad("%s=%s: no PEM certificate in the file", CA, errtext.Quote(f))
		}
	}
	cert, key := q.Get(Cert), q.Get(Key)
	switch {
	case cert != "" && key == "":
		return nil, bad("%s without %s: a client certificate needs its key", Cert, Key)
	case key != "" && cert == "":
		return nil, bad("%s without %s: a client key needs its certificate", Key, Cert)
	case cert != "":
		for _, f := range []struct{ p, file string }{{Cert, cert}, {Key, key}} {
			if _, err := os.ReadFile(f.file); err != nil {
				return nil, bad("%s: %v", f.p, err)
			}
		}
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, bad("%s=%q and %s=%q: %v", Cert, cert, Key, key, err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}

// Failed reports whether err is a TLS failure that trying again will not
// mend: the server's certificate did not verify, the server sent a TLS
// alert (it refused our certificate, or its absence), or it does not
// speak TLS.
func Failed(err error) bool {
	if err == nil {
		return false
	}
	var verr *tls.CertificateVerificationError
	var rerr tls.RecordHeaderError
	var aerr tls.AlertError
	var oerr *net.OpError
	return errors.As(err, &verr) || errors.As(err, &rerr) || errors.As(err, &aerr) ||
		(errors.As(err, &oerr) && oerr.Op == "remote error")
}
