//go:build demo

package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/dlock-go/dlock/lock"
)

// workerEvent is one line of a worker's standard output, in JSON: first
// {"ready":true} once connected, then one per grant or failed attempt.
type workerEvent struct {
	Ready   bool   `json:"ready,omitempty"`
	Key     int    `json:"key"`
	Token   uint64 `json:"token,omitempty"`
	WaitNS  int64  `json:"wait_ns,omitempty"`
	Overlap bool   `json:"overlap,omitempty"` // another holder was inside
	Stale   bool   `json:"stale,omitempty"`   // token not above every earlier one
	Lost    bool   `json:"lost,omitempty"`    // Done closed while held
	Err     string `json:"err,omitempty"`
}

type workerConfig struct {
	url      string
	keys     []string
	dir      string // resource files: dir/0, dir/1, ...
	duration time.Duration
	hold     time.Duration
	ttl      time.Duration
	log      logFlags
}

// workerOpenTimeout bounds a demo worker's lock.Open: the demo has found
// the backend reachable already, and a worker that cannot open it fails
// the backend's run.
const workerOpenTimeout = 15 * time.Second

func cmdDemoWorker(args []string) int {
	var cfg workerConfig
	fs := flag.NewFlagSet(demoWorkerCmd, flag.ContinueOnError)
	fs.StringVar(&cfg.url, "url", "", "backend URL")
	keys := fs.String("keys", "", "comma-separated keys")
	fs.StringVar(&cfg.dir, "resources", "", "directory of the resource files, one per key")
	fs.DurationVar(&cfg.duration, "duration", 2*time.Second, "how long to contend")
	fs.DurationVar(&cfg.hold, "hold", 2*time.Millisecond, "mean time to hold a lock")
	fs.DurationVar(&cfg.ttl, "ttl", 5*time.Second, "lease TTL")
	cfg.log.register(fs)
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	cfg.keys = strings.Split(*keys, ",")
	if cfg.url == "" || *keys == "" || cfg.dir == "" {
		fmt.Fprintln(os.Stderr, "dlock demo-worker: -url, -keys and -resources are required")
		return exitUsage
	}
	if err := cfg.work(); err != nil {
		fmt.Fprintf(os.Stderr, "dlock demo-worker (%s): %v\n", backendName(cfg.url), err)
		return exitBackend
	}
	return exitOK
}

// work connects, says ready, waits for "go" on stdin, then takes random
// keys for the duration, entering and leaving each key's resource while it
// holds the lock.
func (cfg *workerConfig) work() error {
	log, err := cfg.log.logger(os.Stderr)
	if err != nil {
		return err
	}
	routeLibraryLogs(log)
	res := make([]*resource, len(cfg.keys))
	for i := range cfg.keys {
		if res[i], err = openResource(filepath.Join(cfg.dir, fmt.Sprint(i))); err != nil {
			return err
		}
		defer res[i].Close()
	}
	octx, cancel := context.WithTimeout(context.Background(), workerOpenTimeout)
	defer cancel()
	locker, err := lock.Open(octx, cfg.url)
	if err != nil {
		return err
	}
	defer locker.Close()
	// Connect before saying ready: most clients connect at their first
	// call (PostgreSQL's pool, with a password exchange, takes the longest),
	// which would otherwise eat into the contention time and the waits.
	warm, err := locker.TryLock(octx, "dlock-demo/probe/"+randomID(), lock.WithTTL(5*time.Second))
	if err != nil {
		return fmt.Errorf("connecting: %w", err)
	}
	if err := warm.Unlock(octx); err != nil {
		return fmt.Errorf("connecting: %w", err)
	}
	cancel()

	out := bufio.NewWriter(os.Stdout)
	enc := json.NewEncoder(out)
	emit := func(ev workerEvent) error {
		if err := enc.Encode(ev); err != nil {
			return err
		}
		return out.Flush()
	}
	if err := emit(workerEvent{Ready: true}); err != nil {
		return err
	}
	line, _ := bufio.NewReader(os.Stdin).ReadString('\n')
	if strings.TrimSpace(line) != "go" {
		return errors.New("the demo ended before the start") // stdin closed: the parent is gone
	}

	ctx, cancel := context.WithTimeout(context.Background(), cfg.duration)
	defer cancel()
	for ctx.Err() == nil {
		k := rand.IntN(len(cfg.keys))
		start := time.Now()
		lease, err := locker.Lock(ctx, cfg.keys[k], lock.WithTTL(cfg.ttl))
		wait := time.Since(start)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			log.Warn("dlock demo: lock failed", "key", cfg.keys[k], "err", err)
			if err := emit(workerEvent{Key: k, Err: err.Error()}); err != nil {
				return err
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		ev := workerEvent{Key: k, Token: lease.Token(), WaitNS: int64(wait)}
		ev.Overlap, ev.Stale, err = res[k].enter(lease.Token())
		if err != nil {
			return err
		}
		// The work: hold the lock for hold/2 to 3*hold/2.
		time.Sleep(cfg.hold/2 + rand.N(cfg.hold+1))
		if err := res[k].leave(lease.Token()); err != nil {
			return err
		}
		ev.Lost = lease.Err() != nil
		uctx, ucancel := context.WithTimeout(context.Background(), releaseTimeout)
		uerr := lease.Unlock(uctx)
		ucancel()
		switch {
		case errors.Is(uerr, lock.ErrNotHeld):
			ev.Lost = true // lost after the check above
		case uerr != nil:
			ev.Err = "unlock: " + uerr.Error()
		}
		if err := emit(ev); err != nil {
			return err
		}
	}
	return nil
}
