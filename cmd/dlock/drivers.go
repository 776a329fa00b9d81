package main

// The backends dlock can use: each import registers its URL schemes with
// lock.Open.
import (
	_ "github.com/dlock-go/dlock/driver/memcached"
	_ "github.com/dlock-go/dlock/driver/memory"
	_ "github.com/dlock-go/dlock/driver/postgres"
	_ "github.com/dlock-go/dlock/driver/redisnx"
	_ "github.com/dlock-go/dlock/driver/rediswatch"
	_ "github.com/dlock-go/dlock/driver/zookeeper"
)
