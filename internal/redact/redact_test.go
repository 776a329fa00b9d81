package redact

import (
	"net/url"
	"slices"
	"testing"
)

func TestRaw(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{"redisnx://u:secret@h:6379/0", "redisnx://u:xxxxx@h:6379/0"},
		{"redisnx://u@h", "redisnx://u@h"},
		{"redisnx://h?master_name=m&password=secret&username=u", "redisnx://h?master_name=m&password=xxxxx&username=u"},
		{"redisnx://h?Sentinel_Password=s%21&pool_size=1", "redisnx://h?Sentinel_Password=xxxxx&pool_size=1"},
		{"redisnx://h?pass%77ord=secret", "redisnx://h?pass%77ord=xxxxx"}, // the name decoded
		{"redisnx://h?a=1;password=secret", "redisnx://h?a=1;password=xxxxx"},
		{"redisnx://h?password=", "redisnx://h?password="},
		{"redisnx:u:secret@h?password=secret", "redisnx:xxxxx@h?password=xxxxx"}, // opaque: more hidden
		// net/url cannot parse these.
		{"redisnx://u:secret@[::1?password=secret", "redisnx://u:xxxxx@[::1?password=xxxxx"},
		{"redisnx://u:s#cret@h:1:2", "redisnx://u:xxxxx@h:1:2"},
		{"redisnx://u:s?c/ret@h:1:2?password=secret", "redisnx://u:xxxxx@h:1:2?password=xxxxx"},
		{"u:secret@127.0.0.1:6379", "u:xxxxx@127.0.0.1:6379"},
		{"memory://", "memory://"},
		{"", ""},
	} {
		if got := Raw(tc.raw); got != tc.want {
			t.Errorf("Raw(%q) = %q, want %q", tc.raw, got, tc.want)
		}
		if u, err := url.Parse(tc.raw); err == nil && u.String() == tc.raw {
			if got := URL(u); got != tc.want {
				t.Errorf("URL(%q) = %q, want %q", tc.raw, got, tc.want)
			}
		}
	}
}

func TestSecrets(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want []string
	}{
		{"redisnx://u:secret@h:6379/0", []string{"secret"}},
		{"redisnx://u:p%40ss@h", []string{"p%40ss", "p@ss"}},
		{"redisnx://u:p@ss@h/0?x=@", []string{"p@ss"}}, // the authority's last @
		{"redisnx://u:secret@[::1", []string{"secret"}},
		{"redisnx://h/0?x=a@b&password=a+b%21", []string{"a+b%21", "a+b!", "a b!"}},
		{"redisnx://:one@h?master_name=m&password=two", []string{"one", "two"}},
		{"redisnx://:secret@h", []string{"secret"}},
		{"u:secret@127.0.0.1:6379", []string{"secret"}}, // no scheme
		{"redisnx://u@h?pool_size=1", nil},
		{"redisnx://h:6379", nil},
		{"", nil},
		{"memory://", nil},
	} {
		if got := Secrets(tc.raw); !slices.Equal(got, tc.want) {
			t.Errorf("Secrets(%q) = %q, want %q", tc.raw, got, tc.want)
		}
	}
}

func TestSecretParam(t *testing.T) {
	for name, want := range map[string]bool{
		"password": true, "sentinel_password": true, "PASSWORD": true, "passwd": true, "pwd": true,
		"auth_token": true, "client_secret": true,
		"username": false, "master_name": false, "tls_key": false, "tls_cert": false, "prefix": false,
	} {
		if SecretParam(name) != want {
			t.Errorf("SecretParam(%q) = %v, want %v", name, !want, want)
		}
	}
}

// TestScrubShortPasswords: passwords of 1 to 3 characters that occur in
// ordinary words are hidden where they stand as passwords and nowhere
// else, so every message stays readable and its gaps do not tell them.
func TestScrubShortPasswords(t *testing.T) {
	msg := "lock: not acquired: trylock \"a\": the key is taken; token 12"
	for _, pw := range []string{"y", "a", "k", "t", "lo", "ke", "ock", "the", "12", "%"} {
		esc := url.QueryEscape(pw)
		raws := []string{"redisnx://u:" + esc + "@h:6379", "redisnx://h?master_name=m&password=" + esc}
		for _, tc := range []struct{ in, want string }{
			{msg, msg},
			{"dial redisnx://u:" + esc + "@h:6379: refused; " + msg, "dial redisnx://u:xxxxx@h:6379: refused; " + msg},
			{"sentinel redisnx://h?master_name=m&password=" + esc + " down", "sentinel redisnx://h?master_name=m&password=xxxxx down"},
			{"config: user=u password='" + pw + "' host=h", "config: user=u password='xxxxx' host=h"},
			{"parse \"redisnx://u:" + pw + "@h:1:2\": invalid port", "parse \"redisnx://u:xxxxx@h:1:2\": invalid port"},
		} {
			if got := Scrub(tc.in, raws...); got != tc.want {
				t.Errorf("password %q: Scrub(%q) = %q, want %q", pw, tc.in, got, tc.want)
			}
		}
	}
}
