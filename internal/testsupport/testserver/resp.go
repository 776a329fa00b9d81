package testserver

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// respDo sends one Redis command on a fresh connection and returns the
// reply as a string (status, integer or bulk). An error reply is an error.
// The harness speaks this much RESP itself so it needs no client library.
func respDo(ctx context.Context, addr string, args ...string) (string, error) {
	return respDoTLS(ctx, addr, nil, args...)
}

// respDoTLS is respDo over TLS with tc (plain TCP when tc is nil).
func respDoTLS(ctx context.Context, addr string, tc *tls.Config, args ...string) (string, error) {
	conn, err := probeDial(ctx, addr, tc)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	} else {
		conn.SetDeadline(time.Now().Add(5 * time.Second))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(conn, b.String()); err != nil {
		return "", err
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", fmt.Errorf("empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", fmt.Errorf("redis: %s", line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return "", fmt.Errorf("unexpected reply %q", line)
}

// textDo sends one line of a text protocol (memcached, ZooKeeper four-letter
// words) and reads the reply until the server closes the connection or a
// line satisfying done arrives.
func textDo(ctx context.Context, addr, cmd string, done func(reply string) bool) (string, error) {
	return textDoTLS(ctx, addr, nil, cmd, done)
}

// textDoTLS is textDo over TLS with tc (plain TCP when tc is nil).
func textDoTLS(ctx context.Context, addr string, tc *tls.Config, cmd string, done func(reply string) bool) (string, error) {
	conn, err := probeDial(ctx, addr, tc)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	} else {
		conn.SetDeadline(time.Now().Add(5 * time.Second))
	}
	if _, err := io.WriteString(conn, cmd); err != nil {
		return "", err
	}
	var out strings.Builder
	r := bufio.NewReader(conn)
	for {
		line, err := r.ReadString('\n')
		out.WriteString(line)
		if done != nil && done(out.String()) {
			return out.String(), nil
		}
		if err == io.EOF {
			return out.String(), nil
		}
		if err != nil {
			return out.String(), err
		}
	}
}
