// Package redact hides the secrets of a backend URL, so that no error, log
// record or printed line quotes them: the password of the user information
// (user:password@) and the value of every query parameter whose name says
// it is a secret (SecretParam: go-redis's password= of a Sentinel URL, and
// any other such name, known or not, since a mistyped parameter is quoted
// in the error that refuses it). Every place that quotes a URL uses URL or
// Raw; a writer that may echo a URL from elsewhere uses Scrub.
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

// Scrub returns text with the secrets of raws (URLs) hidden where they
// stand as secrets: a password between ':' and '@' (user information), or
// a value after "name=" (or "name='", "name=\"") whose name is a secret
// parameter (SecretParam), ending where a value ends. A secret's text
// elsewhere is left alone: a short password is also a piece of ordinary
// words, and hiding every occurrence would garble messages and, by the
// gaps, tell the password. It is for text a client library writes, which
// may quote a URL or a key=value connection string.
func Scrub(text string, raws ...string) string {
	var secrets []string
	for _, raw := range raws {
		for _, s := range Secrets(raw) {
			if !slices.Contains(secrets, s) {
				secrets = append(secrets, s)
			}
		}
	}
	slices.SortStableFunc(secrets, func(a, b string) int { return len(b) - len(a) })
	for _, s := range secrets {
		text = scrubOne(text, s)
	}
	return text
}

// scrubOne hides each occurrence of secret in text that stands as a
// secret (see Scrub).
func scrubOne(text, secret string) string {
	var b strings.Builder
	last := 0
	for i := 0; i <= len(text)-len(secret); {
		j := strings.Index(text[i:], secret)
		if j < 0 {
			break
		}
		at, end := i+j, i+j+len(secret)
		if asSecret(text, at, end) {
			b.WriteString(text[last:at])
			b.WriteString(Mask)
			last = end
			i = end
			continue
		}
		i = at + 1
	}
	if last == 0 {
		return text
	}
	b.WriteString(text[last:])
	return b.String()
}

// asSecret reports whether text[at:end] stands as a secret: a password
// of user information (":" before, "@" after), or the whole value of a
// secret parameter (a secret name and "=" before, optionally a quote;
// after, the end of the value).
func asSecret(text string, at, end int) bool {
	before, after := text[:at], text[end:]
	if strings.HasSuffix(before, ":") && strings.HasPrefix(after, "@") {
		return true
	}
	before = strings.TrimRight(before, `"'`)
	if !strings.HasSuffix(before, "=") {
		return false
	}
	before = before[:len(before)-1]
	name := before[strings.LastIndexFunc(before, func(r rune) bool { return !nameRune(r) })+1:]
	if name == "" || !SecretParam(name) {
		return false
	}
	return after == "" || !valueByte(after[0])
}

// nameRune reports whether r may be part of a parameter's name.
func nameRune(r rune) bool {
	return r == '_' || r == '-' || r == '.' || r == '%' ||
		'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9'
}

// valueByte reports whether c would continue a query value (so the text
// before it is not the whole value).
func valueByte(c byte) bool {
	return c == '_' || c == '-' || c == '.' || c == '~' || c == '%' || c == '+' || c == '!' ||
		'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
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
