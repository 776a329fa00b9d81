package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// secretURL is a backend URL with a secret in one place and, unless it is
// valid, something wrong elsewhere.
type secretURL struct {
	raw    string
	secret string // what no output may contain: the secret's unique stem
	valid  bool   // parses; fails only because nothing listens
}

// secretPlaces are where a URL may carry a secret: the user information
// and the query parameters that name one (go-redis's password= of a
// Sentinel URL, and mistyped or unknown ones). %s is the secret.
var secretPlaces = []struct {
	user, param string
	validOn     func(form string) bool
}{
	{user: "u:%s@", validOn: func(form string) bool { return true }},
	{param: "password=%s", validOn: func(form string) bool { return form == "failover" }},
	{param: "sentinel_password=%s"},
	{param: "passwd=%s"},
}

// secretForms are the URL forms of each scheme: hosts, path and query.
var secretForms = map[string][]struct{ name, hosts, path, query string }{
	"redis": {
		{"single", "H", "/0", ""},
		{"cluster", "H,H2", "", ""},
		{"failover", "H,H2", "", "master_name=m&username=prim"},
	},
	"memcached": {{"single", "H", "", ""}, {"several", "H,H2", "", ""}},
	"zookeeper": {{"single", "H", "/app", ""}, {"ensemble", "H,H2", "/app", ""}},
	"memory":    {{"named", "name", "", ""}},
	"postgres":  {{"single", "H", "/db", ""}, {"several", "H,H2", "/db", ""}},
}

// secretFaults are what makes a URL invalid besides its secret: "" is
// none (a valid URL whose servers are down).
var secretFaults = []string{"", "unknown parameter", "bad value", "bad host", "bad path", "missing TLS file", "opaque", "unparseable"}

// secretURLs builds, for every scheme lock.Open knows, a URL per form,
// secret place and fault, each with its own secret. down is an address
// where nothing listens.
func secretURLs(down string) []secretURL {
	var out []secretURL
	n := 0
	for _, scheme := range lock.Schemes() {
		family := scheme
		if strings.HasPrefix(scheme, "redis") {
			family = "redis"
		}
		if scheme == "postgresql" {
			family = "postgres"
		}
		forms, ok := secretForms[family]
		if !ok {
			panic("secretForms: no URL forms for scheme " + scheme)
		}
		for _, form := range forms {
			for _, place := range secretPlaces {
				for _, fault := range secretFaults {
					n++
					stem := fmt.Sprintf("Sk%03dz", n)
					secret := stem + "%21" // ! percent-encoded: both forms must stay hidden
					valid := fault == "" && place.validOn != nil && place.validOn(form.name)
					if family == "postgres" {
						// pgx takes every query parameter (the server's
						// runtime parameters) and any database name.
						valid = fault == "" || fault == "unknown parameter" || fault == "bad path"
					}
					if fault == "" && !valid {
						continue
					}
					out = append(out, secretURL{raw: buildSecretURL(scheme, form.hosts, form.path, form.query, place.user, place.param, secret, fault, down), secret: stem, valid: valid})
				}
			}
		}
	}
	return out
}

// buildSecretURL assembles one URL of secretURLs.
func buildSecretURL(scheme, hosts, path, query, user, param, secret, fault, down string) string {
	hosts = strings.NewReplacer("H2", "127.0.0.1:1", "H", down).Replace(hosts)
	params := []string{}
	if query != "" {
		params = append(params, query)
	}
	if param != "" {
		params = append(params, fmt.Sprintf(param, secret))
	}
	sep := "://"
	switch fault {
	case "unknown parameter":
		params = append(params, "bogus=1")
	case "bad value":
		params = append(params, "ttl=nope")
	case "bad host":
		hosts = "h:1:2," + hosts
	case "bad path":
		path = "/x//y"
	case "missing TLS file":
		params = append(params, "tls_ca=/nonexistent/ca.pem")
	case "opaque":
		sep = ":"
	case "unparseable":
		hosts = "[::1," + hosts
	}
	if user != "" {
		user = fmt.Sprintf(user, secret)
	}
	raw := scheme + sep + user + hosts + path
	if len(params) > 0 {
		raw += "?" + strings.Join(params, "&")
	}
	return raw
}

// TestOpenErrorsHideSecrets: for every scheme and URL form, a secret in
// any place of the URL (the user information's password, a password
// parameter, a mistyped one) appears in no error of lock.Open or of the
// first call, in no message that names the backend, and in no output of
// dlock inspect, whatever else is wrong with the URL.
func TestOpenErrorsHideSecrets(t *testing.T) {
	down := closedAddr(t)
	urls := secretURLs(down)
	if len(urls) < 100 {
		t.Fatalf("only %d URLs", len(urls))
	}
	// All at once (t.Parallel would run GOMAXPROCS at a time): the valid
	// URLs spend their time waiting for refused connections.
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, su := range urls {
		wg.Add(1)
		go t.Run(su.raw, func(t *testing.T) {
			defer wg.Done()
			texts := openTexts(t, su)
			var out, errOut strings.Builder
			cfg := &inspectConfig{url: su.raw, key: "k", timeout: secretTimeout}
			code := cfg.run(&out, &errOut)
			texts = append(texts, "inspect stdout: "+out.String(), "inspect stderr: "+errOut.String(),
				"backendName: "+backendName(su.raw), "backendNameRaw: "+backendNameRaw(su.raw))
			if code == exitOK || code == exitConflict {
				t.Errorf("dlock inspect -url %s: exit %d, want a failure", su.raw, code)
			}
			for _, s := range texts {
				if strings.Contains(s, su.secret) {
					t.Errorf("URL %s: the secret %s in %s", su.raw, su.secret, s)
				}
			}
		})
	}
}

// secretTimeout bounds each call of TestOpenErrorsHideSecrets: its valid
// URLs name servers that refuse connections.
const secretTimeout = 300 * time.Millisecond

// openTexts opens su.raw with lock.Open and, when that works, tries a
// lock, and returns the errors' texts; an invalid URL must fail with
// ErrInvalid (the check meant to refuse it ran).
func openTexts(t *testing.T, su secretURL) []string {
	ctx, cancel := context.WithTimeout(context.Background(), secretTimeout)
	defer cancel()
	l, err := lock.Open(ctx, su.raw)
	if err != nil {
		if !su.valid && !errors.Is(err, lock.ErrInvalid) {
			t.Errorf("Open(%s): %v, want ErrInvalid", su.raw, err)
		}
		return []string{"Open: " + err.Error()}
	}
	defer l.Close()
	if !su.valid {
		t.Errorf("Open(%s) accepted an invalid URL", su.raw)
	}
	_, err = l.TryLock(ctx, "k")
	if err == nil {
		t.Errorf("TryLock on %s: no error with the servers down", su.raw)
		return nil
	}
	return []string{"TryLock: " + err.Error()}
}
