// Command dlock is the dlock command with etcd's backend: the command of
// github.com/dlock-go/dlock/cmd/dlock (the same commands, flags, output
// and exit statuses), with every backend of dlock's main module and
// etcd:// too. It is part of etcd's driver module,
// github.com/dlock-go/dlock/driver/etcd, so that cmd/dlock, and every
// program without etcd, never needs etcd's client (gRPC, protobuf).
//
// Install a release of the module:
//
//	go install github.com/dlock-go/dlock/driver/etcd/cmd/dlock@latest
//
// or build it in a clone of the repository, where the module's go.mod
// takes the main module from the clone (a replace directive, which go
// install ...@version refuses in a module it downloads):
//
//	cd driver/etcd && go build -o dlock ./cmd/dlock
//
// The manual is cmd/dlock's: go doc github.com/dlock-go/dlock/cmd/dlock.
// An etcd URL names the members and a key prefix, with the parameters of
// go doc github.com/dlock-go/dlock/driver/etcd:
//
//	export DLOCK_URL=etcd://h1:2379,h2:2379,h3:2379/app/locks
//	dlock run -n nightly-report ./report.sh
//	dlock inspect nightly-report
//
// dlock help lists etcd among the backends compiled in. dlock demo does
// not run on etcd: it leaves an etcd:// URL out, and runs on the other
// backends.
package main
