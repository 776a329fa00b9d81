//go:build demo

package cli

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/go-zookeeper/zk"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/driver/memcached"
	"github.com/dlock-go/dlock/driver/postgres"
	"github.com/dlock-go/dlock/driver/zookeeper"
	"github.com/dlock-go/dlock/internal/redisx"
	"github.com/dlock-go/dlock/lock"
)

// pauser freezes a server the demo started (SIGSTOP) and continues it
// (SIGCONT).
type pauser interface {
	Pause() error
	Resume() error
}

// fault makes a holder lose its lease, for the fencing scene. A fault of
// each kind: pauseFault where the demo started the server itself,
// deleteFault otherwise.
type fault interface {
	// start injects the fault at the start of the scene and says what it
	// did.
	start(ctx context.Context) (string, error)
	// heal undoes it, once the grant has expired on the server; it
	// returns when a new holder can be granted the key.
	heal() error
}

// pauseFault stops the server with SIGSTOP for hold, a little longer than
// the grant lives on the server: the holder's renewals go unanswered,
// its lease reaches its local deadline and Done fires; after SIGCONT the
// server finds the grant expired and grants the key again. The holder
// must see the loss before anyone else can be granted the key.
type pauseFault struct {
	srv   pauser
	hold  time.Duration
	began time.Time
}

func (f *pauseFault) start(context.Context) (string, error) {
	if err := f.srv.Pause(); err != nil {
		return "", err
	}
	f.began = time.Now()
	return fmt.Sprintf("server paused (SIGSTOP) %v", f.hold), nil
}

func (f *pauseFault) heal() error {
	time.Sleep(time.Until(f.began.Add(f.hold)))
	return f.srv.Resume()
}

// deleteFault deletes the holder's grant on the server behind its back,
// through the backend's own client (lock.As on a Locker of the demo's,
// not the holder's): the holder finds the grant gone at its next renewal,
// and Done fires then; meanwhile the key is free for anyone. That is
// outside what a lock can promise, and what fencing tokens are for.
type deleteFault struct {
	op  *lock.Locker
	url string
	key string
}

func (f *deleteFault) start(ctx context.Context) (string, error) {
	how, err := deleteGrant(ctx, f.op, f.url, f.key)
	if err != nil {
		return "", err
	}
	return "its grant deleted (" + how + ")", nil
}

func (f *deleteFault) heal() error { return nil }

// deleteGrant deletes the grant of key on the backend of l, opened from
// rawURL, with the backend's client, in the layout its driver documents,
// and says how.
func deleteGrant(ctx context.Context, l *lock.Locker, rawURL, key string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", err
	}
	prefix := u.Query().Get("prefix")
	switch u.Scheme {
	case "redisnx", "rediswatch":
		var c redis.UniversalClient
		if !l.As(&c) {
			return "", errors.New("no Redis client behind the Locker")
		}
		if prefix == "" {
			prefix = redisx.DefaultPrefix
		}
		k := redisx.LockKey(prefix, key)
		if n, err := c.Del(ctx, k).Result(); err != nil || n != 1 {
			return "", fmt.Errorf("DEL %s: %d keys deleted, %v", k, n, err)
		}
		return "Redis DEL", nil
	case "memcached":
		var c *memcache.Client
		if !l.As(&c) {
			return "", errors.New("no memcached client behind the Locker")
		}
		if prefix == "" {
			prefix = memcached.DefaultPrefix
		}
		k := prefix + "l=" + key // the demo's keys fit as they are
		if err := c.Delete(k); err != nil {
			return "", fmt.Errorf("delete %s: %v", k, err)
		}
		return "memcached delete", nil
	case "zookeeper":
		var c *zk.Conn
		if !l.As(&c) {
			return "", errors.New("no ZooKeeper connection behind the Locker")
		}
		return deleteZKNodes(c, strings.TrimSuffix(u.Path, "/")+"/"+zookeeper.EscapeKey(key))
	case "etcd":
		return deleteEtcdEntries(ctx, u, key)
	case "postgres", "postgresql":
		var pool *pgxpool.Pool
		if !l.As(&pool) {
			return "", errors.New("no PostgreSQL pool behind the Locker")
		}
		schema := u.Query().Get("schema")
		if schema == "" {
			schema = postgres.DefaultSchema
		}
		// An exclusive grant lives in the key's row (schema version 3 and
		// later: driver/postgres's schema.sql); the demo's key has A's
		// alone, which this clears.
		table := pgx.Identifier{schema, "keys"}.Sanitize()
		tag, err := pool.Exec(ctx, "UPDATE "+table+" SET holder = NULL, since = NULL, expires = NULL WHERE key = $1 AND holder IS NOT NULL", key)
		if err != nil || tag.RowsAffected() != 1 {
			return "", fmt.Errorf("UPDATE %s: %d grants cleared, %v", table, tag.RowsAffected(), err)
		}
		return "PostgreSQL UPDATE", nil
	}
	return "", fmt.Errorf("no way to delete a grant of %s", u.Scheme)
}

// deleteEtcdEntries deletes the entries of key's queue (A's grant alone
// in the scene) through etcd's JSON gateway (POST /v3/kv/deleterange),
// which needs no etcd client in this module. The names are driver/etcd's
// (docs/wire/etcd.md): PREFIX "q/" esc(K) "/", PREFIX the URL's path with
// a "/" added, else "dlock/". Plain etcd:// URLs without user info only.
func deleteEtcdEntries(ctx context.Context, u *url.URL, key string) (string, error) {
	if u.User != nil || u.RawQuery != "" {
		return "", errors.New("the demo deletes etcd grants only on plain etcd://host:port[/prefix] URLs")
	}
	prefix := "dlock/"
	if p := strings.Trim(u.Path, "/"); p != "" {
		prefix = p + "/"
	}
	esc := strings.NewReplacer("%", "%25", "/", "%2F").Replace(key)
	queue := prefix + "q/" + esc + "/"
	end := queue[:len(queue)-1] + "0" // the first key after every one under queue ('/'+1)
	body, _ := json.Marshal(map[string]string{
		"key":       base64.StdEncoding.EncodeToString([]byte(queue)),
		"range_end": base64.StdEncoding.EncodeToString([]byte(end)),
	})
	host, _, _ := strings.Cut(u.Host, ",")
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+host+"/v3/kv/deleterange", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("etcd deleterange %s: %w", queue, err)
	}
	defer resp.Body.Close()
	var out struct {
		Deleted string `json:"deleted"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK || out.Deleted != "1" {
		return "", fmt.Errorf("etcd deleterange %s: status %s, %q entries deleted, %v", queue, resp.Status, out.Deleted, err)
	}
	return "etcd DeleteRange", nil
}

// deleteZKNodes deletes the lock requests under the key's node.
func deleteZKNodes(c *zk.Conn, node string) (string, error) {
	children, _, err := c.Children(node)
	if err != nil {
		return "", fmt.Errorf("list %s: %v", node, err)
	}
	deleted := 0
	for _, ch := range children {
		if strings.Contains(ch, "lock-") {
			if err := c.Delete(node+"/"+ch, -1); err != nil {
				return "", fmt.Errorf("delete %s/%s: %v", node, ch, err)
			}
			deleted++
		}
	}
	if deleted == 0 {
		return "", fmt.Errorf("no lock node under %s", node)
	}
	return "ZooKeeper delete", nil
}
