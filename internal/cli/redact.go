package cli

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strings"

	"github.com/dlock-go/dlock/internal/redact"
	"github.com/dlock-go/dlock/lock"
)

// backendName is the URL without its secrets (the password and the
// secret query parameters, see internal/redact), for messages.
func backendName(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "the backend"
	}
	return redact.URL(u)
}

// backendNameRaw is raw with its secrets replaced, whether net/url can
// parse it or not.
func backendNameRaw(raw string) string { return redact.Raw(raw) }

// scrubWriter hides secrets in what it writes (redact.Scrub: where they
// stand as secrets in a URL or a key=value string, never as pieces of
// other words). dlock's own messages and log records already name the
// backend by its redacted URL; this is for whatever else may echo the URL
// (a client library's error or debug message), so that the password
// reaches no output. The command's own stderr does not go through it.
type scrubWriter struct {
	w    io.Writer
	raws []string
}

// scrubbing returns w, or a scrubWriter over w when one of raws (URLs)
// has a secret.
func scrubbing(w io.Writer, raws ...string) io.Writer {
	var with []string
	for _, raw := range raws {
		if len(redact.Secrets(raw)) > 0 {
			with = append(with, raw)
		}
	}
	if len(with) == 0 || w == nil {
		return w
	}
	return &scrubWriter{w: w, raws: with}
}

func (s *scrubWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(s.w, redact.Scrub(string(p), s.raws...)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// argURLs returns the values of -url in args (-url V, -url=V, and the
// same with --), for scrubWriter before the flags are parsed: a usage
// error is printed before dlock knows which URL it was given.
func argURLs(args []string) []string {
	var out []string
	for i, a := range args {
		switch {
		case a == "-url" || a == "--url":
			if i+1 < len(args) {
				out = append(out, args[i+1])
			}
		case strings.HasPrefix(a, "-url="), strings.HasPrefix(a, "--url="):
			_, v, _ := strings.Cut(a, "=")
			out = append(out, v)
		}
	}
	return out
}

// schemeHint explains a URL without a scheme, which net/url misreads
// (127.0.0.1:6379 is an error, localhost:6379 the scheme "localhost"):
// it suggests the URL with the scheme that the port suggests, redisnx
// unless the port is memcached's or ZooKeeper's (or etcd's, in the dlock
// that has etcd's driver), and lists the schemes.
// It returns "" for a URL that names a scheme.
func schemeHint(raw string) string {
	if strings.Contains(raw, "://") {
		return ""
	}
	if u, err := url.Parse(raw); err == nil && u.Scheme != "" && slices.Contains(lock.Schemes(), u.Scheme) {
		return "" // memory:, say: lock.Open judges it
	}
	hostport := raw
	if at := strings.LastIndex(hostport, "@"); at >= 0 {
		hostport = hostport[at+1:]
	}
	if i := strings.IndexAny(hostport, "/?#"); i >= 0 {
		hostport = hostport[:i]
	}
	scheme := "redisnx"
	if _, port, err := net.SplitHostPort(strings.Split(hostport, ",")[0]); err == nil {
		switch port {
		case "11211":
			scheme = "memcached"
		case "2181":
			scheme = "zookeeper"
		case "2379":
			if slices.Contains(lock.Schemes(), "etcd") {
				scheme = "etcd"
			}
		}
	}
	guess := redact.Raw(scheme + "://" + raw)
	return fmt.Sprintf("missing scheme: did you mean %s? schemes: %s", guess, strings.Join(lock.Schemes(), ", "))
}
