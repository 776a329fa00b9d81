// Package redact hides the secrets of a backend URL, so that no error, log
// record or printed line quotes them: the password of the user information
// (user:password@) and the value of every query parameter whose name says
// it is a secret (SecretParam: go-redis's password= of a Sentinel URL, and
// any other such name, known or not, since a mistyped parameter is quoted
// in the error that refuses it). Every place that quotes a URL uses URL or
// Raw; a writer that may echo a URL from elsewhere replaces Secrets.
//
// It imports only the standard library, so that lock, the drivers and
// cmd/dlock can all use it.
package redact

import (
	"net/url"
	"slices"
	"strings"
)

// Mask is what a secret is replaced with.
const Mask = "xxxxx"

// secretWords are the parts of a query parameter's name that make its
// value a secret, compared without case: password, sentinel_password,
// passwd, pwd, secret, token, auth, credentials, and the like. This is the
// one list; every redaction reads it through SecretParam.
var secretWords = []string{"pass", "pwd", "secret", "token", "auth", "cred"}

// SecretParam reports whether the value of the query parameter name is a
// secret.
func SecretParam(name string) bool {
	n := strings.ToLower(name)
	for _, w := range secretWords {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// URL returns u as a string with its secrets replaced by Mask, as Raw
// does: unlike url.URL.Redacted, it hides the secret query parameters too,
// and the password of an opaque URL (scheme:user:pass@host, which has no
// user information to net/url).
func URL(u *url.URL) string {
	if u == nil {
		return ""
	}
	return Raw(u.String())
}

// Raw returns raw, a URL that net/url may fail to parse, with its secrets
// replaced by Mask: the password of the user information and the values
// of the secret query parameters (see spans), and nothing else changed.
func Raw(raw string) string { return replace(raw, spans(raw)) }

// Secrets returns what Raw hides in raw as it may appear in output: each
// secret as written (percent-encoded) and decoded, longest first, without
// empty ones. It is for replacing secrets in text that quotes the URL in
// a way this package does not control (a client library's messages).
func Secrets(raw string) []string {
	var out []string
	add := func(s string) {
		if s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	for _, sp := range spans(raw) {
		s := raw[sp[0]:sp[1]]
		add(s)
		if dec, err := url.PathUnescape(s); err == nil {
			add(dec)
		}
		if dec, err := url.QueryUnescape(s); err == nil {
			add(dec)
		}
	}
	// Longest first, so that a strings.Replacer hides a whole secret
	// before a shorter one inside it.
	slices.SortStableFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}

// spans returns the byte ranges of raw's secrets, found without net/url so
// that a malformed URL is covered: the password of the user information
// and the values of the secret query parameters.
//
// The user information ends at the authority's last '@' (the authority
// ends at the first '/', '?' or '#'), and its password follows its first
// ':'. When net/url cannot parse raw and the authority has no '@' but one
// comes later, the password may hold an unescaped '/', '?' or '#': it then
// runs to the last '@' of raw, which may hide more than it, never less.
// The query starts at the first '?' after the user information.
func spans(raw string) [][2]int {
	start := 0
	if i := strings.Index(raw, "://"); i >= 0 {
		start = i + 3
	}
	auth := raw[start:]
	if i := strings.IndexAny(auth, "/?#"); i >= 0 {
		auth = auth[:i]
	}
	at := strings.LastIndex(auth, "@")
	if _, err := url.Parse(raw); at < 0 && err != nil {
		at = strings.LastIndex(raw[start:], "@")
	}
	var out [][2]int
	qfrom := start
	if at >= 0 {
		qfrom = start + at
		if c := strings.IndexByte(raw[start:start+at], ':'); c >= 0 && c+1 < at {
			out = append(out, [2]int{start + c + 1, start + at})
		}
	}
	q := strings.IndexByte(raw[qfrom:], '?')
	if q < 0 {
		return out
	}
	return append(out, querySpans(raw, qfrom+q+1)...)
}

// querySpans returns the byte ranges of the secret values in the query
// that starts at raw[from:] (up to a '#'): the pairs are separated by '&'
// or ';' (which net/url refuses, but a parameter after one is hidden all
// the same), and a name is decoded before SecretParam judges it.
func querySpans(raw string, from int) [][2]int {
	end := len(raw)
	if h := strings.IndexByte(raw[from:], '#'); h >= 0 {
		end = from + h
	}
	var out [][2]int
	for i := from; i < end; {
		n := strings.IndexAny(raw[i:end], "&;")
		if n < 0 {
			n = end - i
		}
		if name, val, ok := strings.Cut(raw[i:i+n], "="); ok && val != "" {
			if dec, err := url.QueryUnescape(name); err == nil {
				name = dec
			}
			if SecretParam(name) {
				out = append(out, [2]int{i + len(raw[i:i+n]) - len(val), i + n})
			}
		}
		i += n + 1
	}
	return out
}

// replace returns s with each of spans (in order, not overlapping)
// replaced by Mask.
func replace(s string, spans [][2]int) string {
	if len(spans) == 0 {
		return s
	}
	var b strings.Builder
	last := 0
	for _, sp := range spans {
		if sp[0] < last {
			continue
		}
		b.WriteString(s[last:sp[0]])
		b.WriteString(Mask)
		last = sp[1]
	}
	b.WriteString(s[last:])
	return b.String()
}
