package main

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// machine describes the host for the result file's header.
func machine() string {
	host, _ := os.Hostname()
	parts := []string{
		host,
		runtime.GOOS + "/" + runtime.GOARCH,
		cpuModel(),
		strconv.Itoa(runtime.NumCPU()) + " CPUs (GOMAXPROCS " + strconv.Itoa(runtime.GOMAXPROCS(0)) + ")",
	}
	if m := memTotal(); m != "" {
		parts = append(parts, m+" RAM")
	}
	if k := kernel(); k != "" {
		parts = append(parts, "kernel "+k)
	}
	parts = append(parts, runtime.Version())
	return strings.Join(parts, ", ")
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "cpu ?"
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if k, v, ok := strings.Cut(s.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "cpu ?"
}

func memTotal() string {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err == nil {
				return strconv.FormatFloat(kb/(1<<20), 'f', 1, 64) + " GiB"
			}
		}
	}
	return ""
}

func kernel() string {
	out, err := exec.Command("uname", "-r").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// loadAvg returns the 1-minute load average, to show how busy the host was.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}

// textCommand sends a one-line text command and returns the first line of
// the reply (memcached "version", ZooKeeper's "srvr").
func textCommand(addr, cmd string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte(cmd)); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

func memcachedVersion(addr string) string {
	line, err := textCommand(addr, "version\r\n")
	if err != nil {
		return "?"
	}
	return strings.TrimPrefix(line, "VERSION ")
}

func zkVersion(addr string) string {
	line, err := textCommand(addr, "srvr")
	if err != nil {
		return "?"
	}
	v := strings.TrimPrefix(line, "Zookeeper version: ")
	v, _, _ = strings.Cut(v, "-")
	return v
}
