package chaos

import (
	"bufio"
	"regexp"
	"strconv"
)

// Request is a client request as the Proxy sees it.
type Request struct {
	// Cmd is the command: RESP's upper-cased name ("EVALSHA", "EXEC"),
	// memcached's word ("add", "cas"), ZooKeeper's operation ("create",
	// "delete", "exists", "ping"), PostgreSQL's kind of request ("startup",
	// "query": the simple protocol, "execute": an extended-protocol
	// request that runs a statement, "prepare": one that only parses it,
	// "sync", "close", and "sslrequest", "auth", "flush", "terminate").
	Cmd string
	// SQL, for PostgreSQL, is the statement the request runs or prepares
	// (a prepared statement's, found by its name).
	SQL string
	// Args are the arguments after the command: RESP's, memcached's words.
	Args []string
	// Paths are the ZooKeeper paths the request names (every operation of
	// a multi), or the memcached key; RESP leaves it empty.
	Paths []string
	// Queued, for RESP's EXEC, are the commands queued since MULTI.
	Queued []Request
	// Mutating is set when applying the request changes the server's
	// state: RESP writes, scripts and EXEC (not commands queued inside
	// MULTI), memcached storage commands, ZooKeeper writes and
	// closeSession, PostgreSQL statements run but LISTEN, UNLISTEN, SHOW
	// and empty ones (a SELECT may call a function that writes).
	Mutating bool
	// Subscribes is set on RESP's SUBSCRIBE, PSUBSCRIBE and SSUBSCRIBE,
	// and PostgreSQL's LISTEN: from then on the connection carries pub/sub
	// messages, or notifications (see Proxy.DelayPubSub).
	Subscribes bool
	// Stream, for gRPC, is the HTTP/2 stream the request was sent on: its
	// reply is the next frame the server sends on it.
	Stream uint32
}

// Name is how notes and faults name the request: its Cmd, and for a
// PostgreSQL statement the function it calls ("execute:dlock.acquire") or
// else its first word.
func (r Request) Name() string {
	if r.SQL == "" {
		return r.Cmd
	}
	if m := sqlCall.FindStringSubmatch(r.SQL); m != nil {
		return r.Cmd + ":" + m[1]
	}
	return r.Cmd + ":" + firstWord(r.SQL)
}

var sqlCall = regexp.MustCompile(`\b([A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*)\(`)

// Protocol is a wire protocol the Proxy can frame.
type Protocol struct {
	Name      string
	newFramer func() framer
}

// The protocols of dlock's backends.
var (
	RESP      = Protocol{"resp", func() framer { return &respFramer{} }}
	Memcached = Protocol{"memcached", func() framer { return &mcFramer{} }}
	ZooKeeper = Protocol{"zookeeper", func() framer { return &zkFramer{} }}
	// PostgreSQL is version 3 of its wire protocol, unencrypted.
	PostgreSQL = Protocol{"postgres", func() framer { return &pgFramer{} }}
)

// framer reads one connection's frames. readRequest runs on the request
// goroutine and readReply on the reply goroutine; each keeps its own state.
type framer interface {
	// readRequest reads one request and says whether a reply will follow.
	// On a parse error (wrapping errParse) frame holds the bytes consumed.
	readRequest(r *bufio.Reader) (frame []byte, req Request, expectReply bool, err error)
	// readReply reads one reply. peek returns the oldest request still
	// awaiting a reply (nil if none), which is the one a reply answers.
	// answers is false for frames that answer no request (pushes, watch
	// events).
	readReply(r *bufio.Reader, peek func() *Request) (frame []byte, answers bool, err error)
}

// readLine appends one line (through '\n') to buf.
func readLine(r *bufio.Reader, buf []byte) ([]byte, string, error) {
	line, err := r.ReadSlice('\n')
	buf = append(buf, line...)
	if err == bufio.ErrBufferFull {
		// A long line: keep reading.
		for err == bufio.ErrBufferFull {
			line, err = r.ReadSlice('\n')
			buf = append(buf, line...)
		}
		if err != nil {
			return buf, "", err
		}
		return buf, trimEOL(string(buf)), nil
	}
	if err != nil {
		return buf, "", err
	}
	return buf, trimEOL(string(line)), nil
}

func trimEOL(s string) string {
	if n := len(s); n > 0 && s[n-1] == '\n' {
		s = s[:n-1]
	}
	if n := len(s); n > 0 && s[n-1] == '\r' {
		s = s[:n-1]
	}
	return s
}

// readN appends exactly n bytes to buf.
func readN(r *bufio.Reader, buf []byte, n int) ([]byte, error) {
	start := len(buf)
	buf = append(buf, make([]byte, n)...)
	read := 0
	for read < n {
		m, err := r.Read(buf[start+read:])
		read += m
		if err != nil && read < n {
			return buf[:start+read], err
		}
	}
	return buf, nil
}

func atoi(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, parseErrorf("bad number %q", s)
	}
	return n, nil
}
