package cli

import (
	"slices"

	"github.com/dlock-go/dlock/lock"
)

// etcdCommand is the dlock that has etcd's driver: etcd's client (gRPC,
// protobuf) is a Go module of its own, driver/etcd, which the main
// module, and so cmd/dlock, does not require.
const etcdCommand = "github.com/dlock-go/dlock/driver/etcd/cmd/dlock"

// etcdMissing says what to do about an etcd:// URL given to a dlock
// without etcd's driver.
const etcdMissing = "this dlock has no etcd backend: etcd's client is a Go module of its own, which this build leaves out. " +
	"The dlock with etcd and every other backend is " + etcdCommand + ": go install " + etcdCommand + "@latest (a release), " +
	"or, in a clone of dlock's repository, cd driver/etcd && go build -o dlock ./cmd/dlock"

// notCompiledIn explains a URL whose scheme is that of a dlock driver
// this build lacks and another dlock build has (etcd's), or returns ""
// (for any other URL, lock.Open judges it).
func notCompiledIn(raw string) string {
	if s := schemeOf(raw); s == "etcd" && !slices.Contains(lock.Schemes(), s) {
		return etcdMissing
	}
	return ""
}
