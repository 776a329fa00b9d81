package testserver

import (
	"fmt"
	"net"
	"strconv"
)

// maxBusBasePort is the highest port a Redis Cluster node may use: the
// cluster bus listens on port+10000, which must stay a valid port.
const maxBusBasePort = 65535 - 10000

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago. It
// listens on port 0 and closes the listener, so another process may take the
// port before the caller binds it; starters retry with new ports when a server
// fails with "Address already in use".
func FreePort() (int, error) {
	ports, err := FreePorts(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// FreePorts returns n distinct free loopback ports (see FreePort).
func FreePorts(n int) ([]int, error) {
	return freePorts(n, false)
}

// freeBusPorts returns n distinct ports p such that both p and p+10000 are
// free, as Redis Cluster nodes need.
func freeBusPorts(n int) ([]int, error) {
	return freePorts(n, true)
}

func freePorts(n int, bus bool) ([]int, error) {
	// Hold every listener until all ports are chosen so the kernel cannot
	// hand out the same port twice.
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	var ports []int
	seen := map[int]bool{}
	for tries := 0; len(ports) < n; tries++ {
		if tries > 200*n {
			return nil, fmt.Errorf("testserver: could not find %d free loopback ports", n)
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("testserver: listen on 127.0.0.1:0: %w", err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		if seen[p] || (bus && (p > maxBusBasePort || seen[p+10000])) {
			l.Close()
			continue
		}
		if bus {
			lb, err := net.Listen("tcp", hostPort(p+10000))
			if err != nil {
				l.Close()
				continue
			}
			held = append(held, lb)
			seen[p+10000] = true
		}
		held = append(held, l)
		seen[p] = true
		ports = append(ports, p)
	}
	return ports, nil
}

func hostPort(port int) string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}
