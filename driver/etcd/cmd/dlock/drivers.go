package main

// The backends this dlock can use: the main module's drivers (those of
// cmd/dlock) and etcd's, each registering its URL schemes with lock.Open.
import (
	_ "github.com/dlock-go/dlock/driver/etcd"
	_ "github.com/dlock-go/dlock/internal/cli/drivers"
)
