package main

// The backends of dlock: every driver, each registering its URL schemes
// with lock.Open. etcd's driver is a module of its own (so that only its
// users download etcd's client); this command's module requires it.
import (
	_ "github.com/dlock-go/dlock/driver/etcd"
	_ "github.com/dlock-go/dlock/internal/cli/drivers"
)
