package rediswatch

import "github.com/dlock-go/dlock/internal/redisx"

// slot is the Redis Cluster hash slot of key.
func slot(key string) uint16 { return uint16(redisx.Slot(key)) }
