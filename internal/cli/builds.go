package cli

import (
	"slices"

	"github.com/dlock-go/dlock/lock"
)

// etcdCommand is the dlock command, which has every backend: etcd's
// client (gRPC, protobuf) is a Go module of its own, driver/etcd, which
// the command's module requires and the main module does not.
const etcdCommand = "github.com/dlock-go/dlock/cmd/dlock"

// etcdMissing says what to do about an etcd:// URL given to a build of
// this package without etcd's driver (its in-process tests).
const etcdMissing = "this dlock has no etcd backend: etcd's client is a Go module of its own, which this build leaves out. " +
	"The dlock command has etcd and every other backend: go install " + etcdCommand + "@latest, " +
	"or, in a clone of dlock's repository, go build -o dlock ./cmd/dlock"

// notCompiledIn explains a URL whose scheme is that of a dlock driver
// this build lacks and the dlock command has (etcd's), or returns ""
// (for any other URL, lock.Open judges it).
func notCompiledIn(raw string) string {
	if s := schemeOf(raw); s == "etcd" && !slices.Contains(lock.Schemes(), s) {
		return etcdMissing
	}
	return ""
}
