//go:build !demoservers

package cli

import "errors"

// canStartServers: this binary cannot start servers. -start-servers links
// internal/testsupport/testserver (and through it a container client) into dlock,
// which a binary that runs cron jobs should not carry or pay for at each
// start; make demo builds with -tags demoservers.
const canStartServers = false

func startServers(kinds []serverKind, logf func(string, ...any)) (map[serverKind]startedServer, map[serverKind]error, func()) {
	errs := map[serverKind]error{}
	for _, k := range kinds {
		errs[k] = errors.New("this dlock was built without -start-servers")
	}
	return nil, errs, func() {}
}
