package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// CPU per operation moves far less with the machine's load than wall time
// does, so the uncontended scenario reports it beside the latencies: the
// client's (this process's user and system time, getrusage, background
// goroutines included) and the server's (Redis INFO cpu and the time its
// commands took, INFO commandstats; Memcached's stats rusage; PostgreSQL's
// processes, read from /proc: see postgres.go). ZooKeeper does not report
// its CPU time.

// clientCPU is the CPU time this process has used so far.
func clientCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serverUsage is what a server says it has spent so far.
type serverUsage struct {
	cpu time.Duration // process CPU time, user and system
	cmd time.Duration // time in commands (Redis commandstats), 0 if unknown
}

// serverMeter reads a server's usage, or says it cannot (ok false).
type serverMeter func(ctx context.Context) (u serverUsage, ok bool)

func newServerMeter(backend, addr string) serverMeter {
	switch backend {
	case "redis":
		rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1})
		return func(ctx context.Context) (serverUsage, bool) { return redisUsage(ctx, rdb) }
	case "memcached":
		return func(context.Context) (serverUsage, bool) { return memcachedUsage(addr) }
	case "postgres":
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		pm, err := postmasterPID(ctx, addr)
		if err != nil {
			return func(context.Context) (serverUsage, bool) { return serverUsage{}, false }
		}
		return func(context.Context) (serverUsage, bool) { return postgresUsage(pm) }
	}
	return func(context.Context) (serverUsage, bool) { return serverUsage{}, false }
}

// redisUsage reads INFO cpu and commandstats (the INFO calls themselves
// left out: their usec is not counted).
func redisUsage(ctx context.Context, rdb *redis.Client) (serverUsage, bool) {
	info, err := rdb.Info(ctx, "cpu", "commandstats").Result()
	if err != nil {
		return serverUsage{}, false
	}
	var u serverUsage
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch {
		case name == "used_cpu_sys" || name == "used_cpu_user":
			s, _ := strconv.ParseFloat(rest, 64)
			u.cpu += time.Duration(s * float64(time.Second))
		case strings.HasPrefix(name, "cmdstat_") && name != "cmdstat_info":
			for _, kv := range strings.Split(rest, ",") {
				if v, ok := strings.CutPrefix(kv, "usec="); ok {
					us, _ := strconv.ParseInt(v, 10, 64)
					u.cmd += time.Duration(us) * time.Microsecond
				}
			}
		}
	}
	return u, true
}

// memcachedUsage reads rusage_user and rusage_system from "stats", on a
// connection of its own.
func memcachedUsage(addr string) (serverUsage, bool) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return serverUsage{}, false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("stats\r\n")); err != nil {
		return serverUsage{}, false
	}
	var u serverUsage
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 1 && f[0] == "END" {
			return u, true
		}
		if len(f) == 3 && (f[1] == "rusage_user" || f[1] == "rusage_system") {
			s, _ := strconv.ParseFloat(f[2], 64)
			u.cpu += time.Duration(s * float64(time.Second))
		}
	}
	return serverUsage{}, false
}

// cpuSamples collects one library's CPU per cycle over several blocks of
// cycles, taken in turns with the other libraries.
type cpuSamples struct {
	client, server, cmd []time.Duration
	serverKnown         bool
}

// figures returns the medians of the blocks.
func (s *cpuSamples) figures() []figure {
	med := func(ds []time.Duration) float64 {
		if len(ds) == 0 {
			return 0
		}
		ds = slices.Clone(ds)
		slices.Sort(ds)
		return float64(ds[len(ds)/2])
	}
	note := fmt.Sprintf("median of %d blocks", len(s.client))
	figs := []figure{{name: "client CPU/cycle", value: med(s.client), unit: duration, dir: lowerBetter, note: note}}
	if !s.serverKnown {
		return append(figs, figure{name: "server CPU/cycle", na: "not reported by this server"})
	}
	figs = append(figs, figure{name: "server CPU/cycle", value: med(s.server), unit: duration, dir: lowerBetter, note: note})
	if len(s.cmd) > 0 && med(s.cmd) > 0 {
		figs = append(figs, figure{name: "server command time/cycle", value: med(s.cmd), unit: duration, dir: lowerBetter, note: "INFO commandstats: a script's own commands count twice, in it and by name"})
	}
	return figs
}

// runQueueWait is how long the threads of process pid ("self" for the
// bench) have waited, runnable, for a CPU (/proc/PID/task/*/schedstat, the
// second field), and whether it could be read: when the machine is loaded,
// a server can be short of CPU time while its own CPU figure looks small.
func runQueueWait(pid string) (time.Duration, bool) {
	tasks, err := filepath.Glob("/proc/" + pid + "/task/*/schedstat")
	if err != nil || len(tasks) == 0 {
		return 0, false
	}
	var wait time.Duration
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue // the thread ended
		}
		f := strings.Fields(string(b))
		if len(f) < 2 {
			return 0, false
		}
		ns, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return 0, false
		}
		wait += time.Duration(ns)
	}
	return wait, true
}

// redisPID is the server's process id (INFO server), when it runs on this
// host (its /proc entry is there and is a redis-server).
func redisPID(ctx context.Context, rdb *redis.Client) (string, bool) {
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return "", false
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			comm, err := os.ReadFile("/proc/" + v + "/comm")
			if err != nil || !strings.HasPrefix(string(comm), "redis") {
				return "", false
			}
			return v, true
		}
	}
	return "", false
}
