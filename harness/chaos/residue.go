package chaos

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/url"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"
)

// Residue finders: what a backend still holds after every holder of a
// scenario released, closed or died (and the TTLs of the dead expired).
// They know no driver's naming; they recognise grants by what every
// driver stores:
//
//   - a grant's value is its owner token, 32 lowercase hex digits (see
//     driver.Lease.Owner), so any key whose value looks like one is a
//     grant that outlived its holders;
//   - a key without an expiry is a leak unless it is an integer (a fencing
//     counter, which must survive);
//   - in ZooKeeper, any ephemeral node, and any lock node (named
//     "...-lock-NNNNNNNNNN", as the Curator and go-zookeeper recipes name
//     them), is a grant or queue entry that outlived its holders.
//
// Other keys with an expiry (tombstones, say) are bounded by it and are not
// residue. FillerPrefix keys are the tests' own.

// FillerPrefix starts the keys tests write to fill a memcached server.
const FillerPrefix = "chaos-filler/"

var ownerToken = regexp.MustCompile(`^[0-9a-f]{32}$`)

func isInteger(v string) bool {
	_, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	return err == nil
}

// RedisResidue lists the grants and leaks left on a Redis server.
func RedisResidue(ctx context.Context, addr string) ([]string, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DisableIdentity: true})
	defer rdb.Close()
	var out []string
	iter := rdb.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		if strings.HasPrefix(k, FillerPrefix) {
			continue
		}
		pttl, err := rdb.PTTL(ctx, k).Result()
		if err != nil {
			return out, err
		}
		typ, err := rdb.Type(ctx, k).Result()
		if err != nil {
			return out, err
		}
		if typ != "string" {
			if pttl < 0 && typ != "none" {
				out = append(out, fmt.Sprintf("%q: %s without expiry", k, typ))
			}
			continue
		}
		v, err := rdb.Get(ctx, k).Result()
		if err == redis.Nil {
			continue // expired meanwhile
		}
		if err != nil {
			return out, err
		}
		switch {
		case ownerToken.MatchString(v) && pttl >= 0:
			out = append(out, fmt.Sprintf("%q: grant of %s, expiring in %v", k, v, pttl))
		case ownerToken.MatchString(v):
			out = append(out, fmt.Sprintf("%q: grant of %s without expiry", k, v))
		case pttl < 0 && !isInteger(v):
			out = append(out, fmt.Sprintf("%q = %q without expiry", k, v))
		}
	}
	return out, iter.Err()
}

// MemcachedResidue lists the grants and leaks left on memcached servers.
func MemcachedResidue(ctx context.Context, addrs []string) ([]string, error) {
	var out []string
	for _, addr := range addrs {
		o, err := memcachedResidue(ctx, addr)
		out = append(out, o...)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

type mcItem struct {
	key string
	exp int64
}

func memcachedResidue(ctx context.Context, addr string) ([]string, error) {
	items, now, err := memcachedDump(ctx, addr)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, it := range items {
		if strings.HasPrefix(it.key, FillerPrefix) || (it.exp >= 0 && it.exp <= now) {
			continue
		}
		v, found, err := memcachedGet(ctx, addr, it.key)
		if err != nil {
			return out, err
		}
		switch {
		case !found:
		case ownerToken.MatchString(v) && it.exp >= 0:
			out = append(out, fmt.Sprintf("%s@%s: grant of %s, expiring in %ds", it.key, addr, v, it.exp-now))
		case ownerToken.MatchString(v):
			out = append(out, fmt.Sprintf("%s@%s: grant of %s without expiry", it.key, addr, v))
		case it.exp < 0 && !isInteger(v):
			out = append(out, fmt.Sprintf("%s@%s = %q without expiry", it.key, addr, v))
		}
	}
	return out, nil
}

func mcDial(ctx context.Context, addr string) (net.Conn, *bufio.Reader, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(10 * time.Second)
	}
	c.SetDeadline(dl)
	return c, bufio.NewReader(c), nil
}

// memcachedDump lists the server's items (lru_crawler metadump) and its
// clock.
func memcachedDump(ctx context.Context, addr string) ([]mcItem, int64, error) {
	c, r, err := mcDial(ctx, addr)
	if err != nil {
		return nil, 0, err
	}
	defer c.Close()
	if _, err := io.WriteString(c, "stats\r\n"); err != nil {
		return nil, 0, err
	}
	var now int64
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, 0, err
		}
		line = strings.TrimSpace(line)
		if line == "END" {
			break
		}
		if v, ok := strings.CutPrefix(line, "STAT time "); ok {
			now, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if _, err := io.WriteString(c, "lru_crawler metadump all\r\n"); err != nil {
		return nil, 0, err
	}
	var items []mcItem
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, 0, err
		}
		line = strings.TrimSpace(line)
		if line == "END" {
			return items, now, nil
		}
		if strings.HasPrefix(line, "ERROR") || strings.HasPrefix(line, "BUSY") {
			return nil, 0, fmt.Errorf("memcached %s: metadump: %s", addr, line)
		}
		var it mcItem
		for _, f := range strings.Fields(line) {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "key":
				it.key, _ = url.QueryUnescape(v)
			case "exp":
				it.exp, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		items = append(items, it)
	}
}

func memcachedGet(ctx context.Context, addr, key string) (string, bool, error) {
	c, r, err := mcDial(ctx, addr)
	if err != nil {
		return "", false, err
	}
	defer c.Close()
	if _, err := io.WriteString(c, "get "+key+"\r\n"); err != nil {
		return "", false, err
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return "", false, err
	}
	w := strings.Fields(line)
	if len(w) < 4 || w[0] != "VALUE" {
		return "", false, nil
	}
	n, err := strconv.Atoi(w[3])
	if err != nil {
		return "", false, err
	}
	b := make([]byte, n+2)
	if _, err := io.ReadFull(r, b); err != nil {
		return "", false, err
	}
	return string(b[:n]), true, nil
}

// zkLockNode matches lock and queue nodes of the Curator-style recipes.
var zkLockNode = regexp.MustCompile(`-(lock|read|write)-\d{10}$`)

// ZooKeeperResidue lists the ephemeral nodes and lock nodes left in a
// ZooKeeper service.
func ZooKeeperResidue(ctx context.Context, addrs []string) ([]string, error) {
	c, events, err := zk.Connect(addrs, 5*time.Second, zk.WithLogger(log.New(io.Discard, "", 0)))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	for c.State() != zk.StateHasSession {
		select {
		case <-events:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	var out []string
	var walk func(p string) error
	walk = func(p string) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		children, _, err := c.Children(p)
		if err == zk.ErrNoNode {
			return nil
		}
		if err != nil {
			return fmt.Errorf("zookeeper children %s: %w", p, err)
		}
		for _, name := range children {
			cp := path.Join(p, name)
			if cp == "/zookeeper" {
				continue
			}
			_, st, err := c.Get(cp)
			if err == zk.ErrNoNode {
				continue
			}
			if err != nil {
				return fmt.Errorf("zookeeper get %s: %w", cp, err)
			}
			switch {
			case st.EphemeralOwner != 0:
				out = append(out, fmt.Sprintf("%s: ephemeral node of session %#x", cp, st.EphemeralOwner))
			case zkLockNode.MatchString(name):
				out = append(out, fmt.Sprintf("%s: persistent lock node", cp))
			}
			if st.NumChildren > 0 {
				if err := walk(cp); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return out, walk("/")
}
