package redisx

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
)

// BenchmarkLaneTakePut is a lane's cost per call, with no command: taking
// it from the free list and giving it back, with the arm for a context
// that can be cancelled (AfterFunc and its stop) and without.
func BenchmarkLaneTakePut(b *testing.B) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	ls := NewLanes(c, nil)
	defer ls.Close()
	run := func(b *testing.B, ctx context.Context) {
		b.ReportAllocs()
		for range b.N {
			ln, err := ls.take(ctx)
			if err != nil {
				b.Fatal(err)
			}
			ls.put(ln)
		}
	}
	b.Run("armed", func(b *testing.B) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		run(b, ctx)
	})
	b.Run("background", func(b *testing.B) { run(b, context.Background()) })
}
