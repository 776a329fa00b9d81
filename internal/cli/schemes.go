package cli

import (
	"net/url"
	"slices"

	"github.com/dlock-go/dlock/lock"
)

// networkSchemes are the network backends' schemes, in the order messages
// list them (the demo's table, netBackends, has its own rows).
var networkSchemes = []string{"redisnx", "rediswatch", "memcached", "zookeeper", "postgres", "etcd"}

// compiledURLs lists the compiled-in network schemes as URL prefixes
// (redisnx://, ...), for messages.
func compiledURLs() []string {
	var s []string
	for _, scheme := range networkSchemes {
		if slices.Contains(lock.Schemes(), scheme) {
			s = append(s, scheme+"://")
		}
	}
	return s
}

// schemeOf returns raw's URL scheme, or "" if raw is no URL.
func schemeOf(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Scheme
	}
	return ""
}
