package chaos

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"strconv"
	"strings"
)

// pgFramer frames PostgreSQL's wire protocol (version 3). The client's
// first message is untyped (int32 length, int32 code): a startup packet,
// or an SSLRequest or GSSENCRequest, which the server answers with one
// byte ('N': go on in clear), or a CancelRequest, which it does not
// answer. Every later message, both ways, is typed: a type byte and an
// int32 length that counts itself.
//
// A request is what the client sends up to a Sync ('S', the extended
// protocol: Parse, Bind, Describe, Execute, Close, then Sync) or one Query
// ('Q', the simple protocol); its reply is what the server sends up to
// ReadyForQuery ('Z'). The startup packet's reply runs to the first
// ReadyForQuery too, but an authentication request (SASL, password) is
// passed on alone, as the client must answer it (its answers, 'p', expect
// no reply of their own). A Flush ('H') or Terminate ('X') ends a request
// that expects no reply; what a Flush makes the server send before the
// next ReadyForQuery passes on as frames that answer nothing, and so do
// the server's messages while no request awaits a reply (a LISTEN
// connection's NotificationResponses, 'A', among them) and a
// NotificationResponse that comes before a reply's first message.
//
// Prepared statements: a Parse names a statement (pgx's statement cache
// sends each statement once per connection) and later Binds refer to the
// name, so the request side keeps each connection's names and their SQL
// (forgotten on a Close of the statement): Request.SQL is the statement a
// request runs, whichever way it names it, or the statements it runs,
// joined by "; ", when it binds several before its Sync (a pipelined
// transaction: BEGIN, the step, COMMIT).
type pgFramer struct {
	// request side
	started bool              // the startup packet was sent
	stmts   map[string]string // prepared statements' SQL, by name
}

// The codes of the untyped first messages.
const (
	pgProtocol3   = 3 << 16
	pgSSLRequest  = 80877103
	pgGSSRequest  = 80877104
	pgCancelCode  = 80877102
	pgMaxStartup  = 10000
	pgMaxMessage  = 1 << 30
	pgPingComment = "--"
)

// readPGMessage appends one typed message (type byte, int32 length, body)
// to buf and returns its type and body.
func readPGMessage(r *bufio.Reader, buf []byte) ([]byte, byte, []byte, error) {
	start := len(buf)
	buf, err := readN(r, buf, 5)
	if err != nil {
		return buf, 0, nil, err
	}
	typ := buf[start]
	n := int(int32(binary.BigEndian.Uint32(buf[start+1 : start+5])))
	if n < 4 || n > pgMaxMessage {
		return buf, typ, nil, parseErrorf("PostgreSQL: message %q of length %d", typ, n)
	}
	if buf, err = readN(r, buf, n-4); err != nil {
		return buf, typ, nil, err
	}
	return buf, typ, buf[start+5:], nil
}

// cstring splits a NUL-terminated string off b.
func cstring(b []byte) (string, []byte) {
	s, rest, ok := bytes.Cut(b, []byte{0})
	if !ok {
		return string(b), nil
	}
	return string(s), rest
}

func (f *pgFramer) readRequest(r *bufio.Reader) ([]byte, Request, bool, error) {
	if !f.started {
		return f.readStartup(r)
	}
	var buf []byte
	var req Request
	var bound, parsed, executes bool
	var binds []string // the statements bound, in order
	for {
		var typ byte
		var body []byte
		var err error
		first := len(buf) == 0
		buf, typ, body, err = readPGMessage(r, buf)
		if err != nil {
			return buf, req, false, err
		}
		switch typ {
		case 'Q': // Query: a request of its own
			if !first {
				return buf, req, false, parseErrorf("PostgreSQL: a Query inside an extended-protocol request")
			}
			req.Cmd, req.SQL = "query", strings.TrimRight(string(body), "\x00")
			f.classify(&req)
			return buf, req, true, nil
		case 'P': // Parse: name, query, parameter types
			name, rest := cstring(body)
			sql, _ := cstring(rest)
			if f.stmts == nil {
				f.stmts = map[string]string{}
			}
			f.stmts[name] = sql
			req.SQL, parsed = sql, true
		case 'B': // Bind: portal, statement, ...
			_, rest := cstring(body)
			name, _ := cstring(rest)
			binds = append(binds, f.stmts[name])
			req.SQL, bound = strings.Join(binds, "; "), true
		case 'E': // Execute
			executes = true
		case 'D': // Describe
		case 'C': // Close: 'S' statement or 'P' portal, name
			if len(body) > 0 && body[0] == 'S' {
				name, _ := cstring(body[1:])
				delete(f.stmts, name)
			}
			if req.Cmd == "" && !parsed && !bound {
				req.Cmd = "close"
			}
		case 'S': // Sync: the end of the request
			switch {
			case executes:
				req.Cmd = "execute"
			case parsed:
				req.Cmd = "prepare"
			case req.Cmd == "":
				req.Cmd = "sync"
			}
			if req.Cmd == "execute" {
				f.classify(&req)
			}
			return buf, req, true, nil
		case 'H': // Flush: the server sends what it has; no ReadyForQuery
			req.Cmd = "flush"
			if executes {
				f.classify(&req)
			}
			return buf, req, false, nil
		case 'X': // Terminate
			return buf, Request{Cmd: "terminate"}, false, nil
		case 'p': // an answer to an authentication request
			return buf, Request{Cmd: "auth"}, false, nil
		case 'd', 'c', 'f': // CopyData, CopyDone, CopyFail: COPY FROM STDIN
			return buf, Request{Cmd: "copy"}, false, nil
		default:
			return buf, req, false, parseErrorf("PostgreSQL: client message type %q", typ)
		}
	}
}

// readStartup reads the untyped first message.
func (f *pgFramer) readStartup(r *bufio.Reader) ([]byte, Request, bool, error) {
	buf, err := readN(r, nil, 4)
	if err != nil {
		return buf, Request{}, false, err
	}
	n := int(int32(binary.BigEndian.Uint32(buf)))
	if n < 8 || n > pgMaxStartup {
		return buf, Request{}, false, parseErrorf("PostgreSQL: startup message of length %d", n)
	}
	if buf, err = readN(r, buf, n-4); err != nil {
		return buf, Request{}, false, err
	}
	switch code := binary.BigEndian.Uint32(buf[4:8]); code {
	case pgSSLRequest:
		return buf, Request{Cmd: "sslrequest"}, true, nil
	case pgGSSRequest:
		return buf, Request{Cmd: "gssencrequest"}, true, nil
	case pgCancelCode:
		return buf, Request{Cmd: "cancel"}, false, nil
	case pgProtocol3:
		f.started = true
		req := Request{Cmd: "startup"}
		for rest := buf[8:]; len(rest) > 1; {
			var k, v string
			k, rest = cstring(rest)
			v, rest = cstring(rest)
			req.Args = append(req.Args, k+"="+v)
		}
		return buf, req, true, nil
	default:
		return buf, Request{}, false, parseErrorf("PostgreSQL: startup code %d", code)
	}
}

// classify sets what a request that runs req.SQL does: Mutating unless
// the statement plainly writes nothing (LISTEN, UNLISTEN, SHOW, an empty
// query or pgx's "-- ping"; a SELECT may call a function that writes),
// and Subscribes for LISTEN.
func (f *pgFramer) classify(req *Request) {
	word := strings.ToUpper(firstWord(req.SQL))
	req.Subscribes = word == "LISTEN"
	switch word {
	case "", "LISTEN", "UNLISTEN", "SHOW":
	default:
		req.Mutating = !strings.HasPrefix(strings.TrimSpace(req.SQL), pgPingComment)
	}
}

func firstWord(sql string) string {
	f := strings.Fields(sql)
	if len(f) == 0 {
		return ""
	}
	return strings.TrimRight(f[0], ";")
}

func (f *pgFramer) readReply(r *bufio.Reader, peek func() *Request) ([]byte, bool, error) {
	req := peek()
	if req != nil && (req.Cmd == "sslrequest" || req.Cmd == "gssencrequest") {
		buf, err := readN(r, nil, 1)
		if err != nil {
			return buf, false, err
		}
		if buf[0] != 'N' {
			return buf, true, parseErrorf("PostgreSQL: %s answered %q: the connection is encrypted", req.Cmd, buf[0])
		}
		return buf, true, nil
	}
	var buf []byte
	for {
		first := len(buf) == 0
		var typ byte
		var body []byte
		var err error
		buf, typ, body, err = readPGMessage(r, buf)
		if err != nil {
			return buf, false, err
		}
		switch {
		case req == nil, typ == 'A' && first:
			// Nothing awaits a reply (a Flush's output, a notice, a LISTEN
			// connection's notification), or a notification before the
			// reply.
			return buf, false, nil
		case typ == 'R' && len(body) >= 4 && binary.BigEndian.Uint32(body) != 0,
			typ == 'G', typ == 'W':
			// An authentication request, CopyInResponse, CopyBothResponse:
			// the client must act before the reply goes on.
			return buf, false, nil
		case typ == 'Z':
			return buf, true, nil
		case typ == 'E' && (req.Cmd == "startup" || pgFatal(body)):
			// The server ends the connection after it.
			return buf, true, nil
		}
	}
}

// pgFatal reports whether an ErrorResponse's severity is FATAL or PANIC
// (its field V, never localized; else S).
func pgFatal(body []byte) bool {
	var sev string
	for len(body) > 1 {
		t := body[0]
		var v string
		v, body = cstring(body[1:])
		switch {
		case t == 'V':
			return v == "FATAL" || v == "PANIC"
		case t == 'S':
			sev = v
		}
	}
	return sev == "FATAL" || sev == "PANIC"
}

// push reports whether a frame that answers no request is a message a
// DropPushes rule may lose: a NotificationResponse, not a notice or a
// parameter's new value.
func (f *pgFramer) push(frame []byte) bool { return len(frame) > 0 && frame[0] == 'A' }

// PostgresRows returns the columns of the DataRows ('D') of a
// PostgreSQL reply frame, one slice per row (a NULL column is nil): in
// text or binary format, as the request asked for them.
func PostgresRows(frame []byte) [][][]byte {
	var rows [][][]byte
	for len(frame) >= 5 {
		typ := frame[0]
		n := int(int32(binary.BigEndian.Uint32(frame[1:5])))
		if n < 4 || len(frame) < 1+n {
			return rows
		}
		body := frame[5 : 1+n]
		frame = frame[1+n:]
		if typ != 'D' || len(body) < 2 {
			continue
		}
		cols := int(binary.BigEndian.Uint16(body))
		body = body[2:]
		row := make([][]byte, 0, cols)
		for range cols {
			if len(body) < 4 {
				return rows
			}
			l := int(int32(binary.BigEndian.Uint32(body)))
			body = body[4:]
			if l < 0 {
				row = append(row, nil)
				continue
			}
			if len(body) < l {
				return rows
			}
			row = append(row, body[:l])
			body = body[l:]
		}
		rows = append(rows, row)
	}
	return rows
}

// PostgresInt reads an integer column of a DataRow, in text or in binary
// format (8, 4 or 2 bytes, big-endian). A column of digits alone is read
// as text: a binary integer made of ASCII digits only is above 3e18 (8
// bytes), which no reply the harness reads holds.
func PostgresInt(col []byte) (int64, bool) {
	text := len(col) > 0
	for _, c := range col {
		text = text && (c >= '0' && c <= '9' || c == '-')
	}
	switch {
	case text:
		v, err := strconv.ParseInt(string(col), 10, 64)
		return v, err == nil
	case len(col) == 8:
		return int64(binary.BigEndian.Uint64(col)), true
	case len(col) == 4:
		return int64(int32(binary.BigEndian.Uint32(col))), true
	case len(col) == 2:
		return int64(int16(binary.BigEndian.Uint16(col))), true
	}
	return 0, false
}

// PostgresNotification decodes a NotificationResponse frame ('A'): the
// channel and the payload.
func PostgresNotification(frame []byte) (channel, payload string, ok bool) {
	if len(frame) < 9 || frame[0] != 'A' {
		return "", "", false
	}
	body := frame[9:] // type, length, the sender's process ID
	channel, body = cstring(body)
	payload, _ = cstring(body)
	return channel, payload, true
}
