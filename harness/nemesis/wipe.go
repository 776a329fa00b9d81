package nemesis

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/dlock-go/dlock/harness/chaos"
	"github.com/redis/go-redis/v9"
)

// wipers return, per server, what makes it come back empty after a kill,
// as a server without persistence does: for a Redis server that keeps an
// append-only file, removing its files (found with CONFIG GET) while it
// is down. Nil when the backend keeps nothing anyway (memcached), must keep
// its data (ZooKeeper: its zxids are the fencing tokens), or its files are
// out of reach (a container).
func (r *run) wipers() []func() error {
	if r.tg.Backend != chaos.RedisBackend || !r.tg.Server.Persistence {
		return nil
	}
	var out []func() error
	for _, a := range r.srv.Addrs {
		w := redisWiper(a)
		if w == nil {
			return nil
		}
		out = append(out, w)
	}
	return out
}

func redisWiper(addr string) func() error {
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DisableIdentity: true})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	dir, err := rdb.ConfigGet(ctx, "dir").Result()
	if err != nil || dir["dir"] == "" {
		return nil
	}
	aof, _ := rdb.ConfigGet(ctx, "appenddirname").Result()
	d := dir["dir"]
	if _, err := os.Stat(d); err != nil {
		return nil // not on this machine's filesystem
	}
	name := aof["appenddirname"]
	if name == "" {
		name = "appendonlydir"
	}
	return func() error {
		if err := os.RemoveAll(filepath.Join(d, name)); err != nil {
			return err
		}
		for _, f := range []string{"appendonly.aof", "dump.rdb"} {
			if err := os.Remove(filepath.Join(d, f)); err != nil && !os.IsNotExist(err) {
				return err
			}
		}
		return nil
	}
}
