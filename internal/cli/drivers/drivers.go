// Package drivers imports the main module's drivers, the backends of
// every dlock command: each import registers its URL schemes with
// lock.Open. cmd/dlock imports it and etcd's driver, a module of its
// own.
package drivers

import (
	_ "github.com/dlock-go/dlock/driver/memcached"
	_ "github.com/dlock-go/dlock/driver/memory"
	_ "github.com/dlock-go/dlock/driver/postgres"
	_ "github.com/dlock-go/dlock/driver/redisnx"
	_ "github.com/dlock-go/dlock/driver/rediswatch"
	_ "github.com/dlock-go/dlock/driver/zookeeper"
)
