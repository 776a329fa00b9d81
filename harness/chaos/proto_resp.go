package chaos

import (
	"bufio"
	"strings"
)

// respFramer frames Redis's RESP2 and RESP3. Requests are arrays of bulk
// strings (or inline commands); a connection that subscribes turns into a
// stream of pushes, whose frames answer no request.
type respFramer struct {
	inMulti bool      // request side: between MULTI and EXEC/DISCARD
	queued  []Request // request side: the commands queued since MULTI
	pubsub  bool      // request side: the connection subscribed
}

var respMutating = map[string]bool{
	"SET": true, "SETNX": true, "SETEX": true, "PSETEX": true, "GETSET": true, "GETDEL": true, "GETEX": true,
	"DEL": true, "UNLINK": true, "EXPIRE": true, "PEXPIRE": true, "EXPIREAT": true, "PEXPIREAT": true,
	"PERSIST": true, "INCR": true, "INCRBY": true, "DECR": true, "DECRBY": true, "MSET": true, "MSETNX": true,
	"EVAL": true, "EVALSHA": true, "FCALL": true, "EXEC": true, "FLUSHALL": true, "FLUSHDB": true,
	"HSET": true, "HDEL": true, "ZADD": true, "ZREM": true, "LPUSH": true, "RPUSH": true, "LPOP": true, "RPOP": true,
}

func (f *respFramer) readRequest(r *bufio.Reader) ([]byte, Request, bool, error) {
	buf, line, err := readLine(r, nil)
	if err != nil {
		return buf, Request{}, false, err
	}
	var args []string
	if strings.HasPrefix(line, "*") {
		n, err := atoi(line[1:])
		if err != nil {
			return buf, Request{}, false, err
		}
		for range n {
			var l string
			if buf, l, err = readLine(r, buf); err != nil {
				return buf, Request{}, false, err
			}
			if !strings.HasPrefix(l, "$") {
				return buf, Request{}, false, parseErrorf("RESP request: want a bulk string, got %q", l)
			}
			size, err := atoi(l[1:])
			if err != nil {
				return buf, Request{}, false, err
			}
			start := len(buf)
			if buf, err = readN(r, buf, size+2); err != nil {
				return buf, Request{}, false, err
			}
			args = append(args, string(buf[start:start+size]))
		}
	} else {
		args = strings.Fields(line) // inline command
	}
	if len(args) == 0 {
		return buf, Request{}, false, nil // empty inline line: no reply
	}
	req := Request{Cmd: strings.ToUpper(args[0]), Args: args[1:]}
	switch req.Cmd {
	case "MULTI":
		f.inMulti, f.queued = true, nil
	case "EXEC", "DISCARD":
		if req.Cmd == "EXEC" {
			req.Queued = f.queued
		}
		f.inMulti, f.queued = false, nil
	case "SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE":
		f.pubsub, req.Subscribes = true, true
	}
	req.Mutating = respMutating[req.Cmd] && (!f.inMulti || req.Cmd == "EXEC")
	if f.inMulti && req.Cmd != "MULTI" {
		f.queued = append(f.queued, req)
	}
	return buf, req, !f.pubsub, nil
}

func (f *respFramer) readReply(r *bufio.Reader, _ func() *Request) ([]byte, bool, error) {
	buf, typ, err := readRESPValue(r, nil)
	return buf, err == nil && typ != '>', err
}

// readRESPValue appends one RESP2/RESP3 value to buf and returns its type
// byte (attributes are read with the value they annotate).
func readRESPValue(r *bufio.Reader, buf []byte) ([]byte, byte, error) {
	buf, line, err := readLine(r, buf)
	if err != nil {
		return buf, 0, err
	}
	if line == "" {
		return buf, 0, parseErrorf("RESP: empty line")
	}
	typ := line[0]
	switch typ {
	case '+', '-', ':', '_', ',', '#', '(':
		return buf, typ, nil
	case '$', '!', '=':
		n, err := atoi(line[1:])
		if err != nil || n < 0 {
			return buf, typ, err
		}
		buf, err = readN(r, buf, n+2)
		return buf, typ, err
	case '*', '~', '>', '%', '|':
		n, err := atoi(line[1:])
		if err != nil || n < 0 {
			return buf, typ, err
		}
		if typ == '%' || typ == '|' {
			n *= 2
		}
		for range n {
			if buf, _, err = readRESPValue(r, buf); err != nil {
				return buf, typ, err
			}
		}
		if typ == '|' { // an attribute precedes the value it annotates
			return readRESPValue(r, buf)
		}
		return buf, typ, nil
	}
	return buf, typ, parseErrorf("RESP: unknown type %q", typ)
}
