package main

// The backends this dlock can use: the main module's drivers, each
// registering its URL schemes with lock.Open. etcd's driver is a module
// of its own: driver/etcd/cmd/dlock is this command with it.
import _ "github.com/dlock-go/dlock/internal/cli/drivers"
