package chaos

import (
	"bufio"
	"encoding/binary"
	"strings"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"golang.org/x/net/http2/hpack"
)

// GRPC is etcd's client protocol: gRPC over HTTP/2 in the clear (h2c),
// one TCP connection per member carrying every call as a stream. The
// proxy frames HTTP/2 and pairs replies with requests by stream, not in
// order: a request is a gRPC message the client sends (a unary call's
// one message, each message of a stream), its reply the first frame the
// server sends on that stream after it (for a unary call, its response
// headers; for a streaming call, the next message). Losing a reply
// closes the connection, which fails every call on it, as a broken
// connection does; holding one holds every frame behind it.
var GRPC = Protocol{"grpc", func() framer { return &grpcFramer{streams: map[uint32]*grpcStream{}} }}

// EtcdBackend is etcd v3 (driver/etcd).
const EtcdBackend Backend = "etcd"

const (
	h2Data         = 0x0
	h2Headers      = 0x1
	h2Continuation = 0x9
	h2EndStream    = 0x1
	h2EndHeaders   = 0x4
	h2Padded       = 0x8
	h2Priority     = 0x20
)

const h2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// grpcFramer keeps, from the client's frames, each stream's method (its
// :path, decoded with the client's HPACK table) and the message bytes
// not yet complete; the reply side keeps the stream of the last frame
// read (replyStream).
type grpcFramer struct {
	preface bool
	dec     *hpack.Decoder
	path    string // set by the decoder's emit function

	mu      sync.Mutex
	streams map[uint32]*grpcStream

	last uint32 // the reply side's last frame's stream
}

type grpcStream struct {
	method string // "Txn", "LeaseKeepAlive", ...
	buf    []byte
}

// h2Frame reads one frame whole: its header, stream, type, flags and
// payload.
func h2Frame(r *bufio.Reader) (frame []byte, typ, flags byte, stream uint32, payload []byte, err error) {
	frame, err = readN(r, nil, 9)
	if err != nil {
		return frame, 0, 0, 0, nil, err
	}
	n := int(frame[0])<<16 | int(frame[1])<<8 | int(frame[2])
	typ, flags, stream = frame[3], frame[4], binary.BigEndian.Uint32(frame[5:9])&0x7fffffff
	frame, err = readN(r, frame, n)
	if err != nil {
		return frame, typ, flags, stream, nil, err
	}
	return frame, typ, flags, stream, frame[9:], nil
}

// unpad strips a DATA or HEADERS frame's padding (and a HEADERS frame's
// priority fields).
func unpad(typ, flags byte, p []byte) ([]byte, error) {
	if flags&h2Padded != 0 {
		if len(p) < 1 || int(p[0]) > len(p)-1 {
			return nil, parseErrorf("http2: bad padding")
		}
		p = p[1 : len(p)-int(p[0])]
	}
	if typ == h2Headers && flags&h2Priority != 0 {
		if len(p) < 5 {
			return nil, parseErrorf("http2: short priority")
		}
		p = p[5:]
	}
	return p, nil
}

func (f *grpcFramer) readRequest(r *bufio.Reader) ([]byte, Request, bool, error) {
	if !f.preface {
		f.preface = true
		b, err := readN(r, nil, len(h2Preface))
		if err == nil && string(b) != h2Preface {
			err = parseErrorf("http2: no client preface")
		}
		return b, Request{Cmd: "preface"}, false, err
	}
	frame, typ, flags, stream, payload, err := h2Frame(r)
	if err != nil {
		return frame, Request{}, false, err
	}
	switch typ {
	case h2Headers:
		block, err := unpad(typ, flags, payload)
		if err != nil {
			return frame, Request{}, false, err
		}
		for flags&h2EndHeaders == 0 { // CONTINUATION frames follow at once
			var more []byte
			var ctyp byte
			start := len(frame)
			var next []byte
			next, ctyp, flags, _, more, err = h2Frame(r)
			frame = append(frame, next...)
			if err != nil {
				return frame[:start+len(next)], Request{}, false, err
			}
			if ctyp != h2Continuation {
				return frame, Request{}, false, parseErrorf("http2: %d after HEADERS", ctyp)
			}
			block = append(append([]byte(nil), block...), more...)
		}
		if f.dec == nil {
			f.dec = hpack.NewDecoder(4096, func(h hpack.HeaderField) {
				if h.Name == ":path" {
					f.path = h.Value
				}
			})
		}
		f.path = ""
		if _, err := f.dec.Write(block); err != nil {
			return frame, Request{}, false, parseErrorf("http2: hpack: %v", err)
		}
		if f.path != "" {
			f.mu.Lock()
			f.streams[stream] = &grpcStream{method: f.path[strings.LastIndexByte(f.path, '/')+1:]}
			f.mu.Unlock()
		}
		return frame, Request{Cmd: "headers"}, false, nil
	case h2Data:
		data, err := unpad(typ, flags, payload)
		if err != nil {
			return frame, Request{}, false, err
		}
		f.mu.Lock()
		s := f.streams[stream]
		f.mu.Unlock()
		if s == nil {
			return frame, Request{Cmd: "data"}, false, nil
		}
		s.buf = append(s.buf, data...)
		var req Request
		got := false
		for len(s.buf) >= 5 {
			n := int(binary.BigEndian.Uint32(s.buf[1:5]))
			if len(s.buf) < 5+n {
				break
			}
			req, got = etcdRequest(s.method, s.buf[5:5+n]), true
			s.buf = s.buf[5+n:]
		}
		if !got {
			return frame, Request{Cmd: "data"}, false, nil
		}
		req.Stream = stream
		return frame, req, true, nil
	}
	return frame, Request{Cmd: "http2"}, false, nil
}

// readReply: a DATA or HEADERS frame on a stream the client opened
// answers its oldest request; others (SETTINGS, PING, WINDOW_UPDATE, a
// stream's later frames) answer none.
func (f *grpcFramer) readReply(r *bufio.Reader, peek func() *Request) ([]byte, bool, error) {
	frame, typ, _, stream, _, err := h2Frame(r)
	f.last = stream
	if err != nil {
		return frame, false, err
	}
	return frame, stream != 0 && (typ == h2Data || typ == h2Headers), nil
}

// replyStream is the stream of the reply readReply read last.
func (f *grpcFramer) replyStream() uint32 { return f.last }

// etcdRequest describes an etcd request: Cmd is the method ("Txn",
// "Range", "LeaseKeepAlive", ...), Paths the keys it compares, reads and
// writes, Args its operations ("cmp:create=", "cmp:mod=", "cmp:lease=",
// "put", "put-lease", "del", "get"), Mutating whether it can change
// anything.
func etcdRequest(method string, msg []byte) Request {
	q := Request{Cmd: method}
	switch method {
	case "Txn":
		var t pb.TxnRequest
		if t.Unmarshal(msg) != nil {
			return q
		}
		for _, c := range t.Compare {
			q.Paths = append(q.Paths, string(c.Key))
			q.Args = append(q.Args, "cmp:"+strings.ToLower(c.Target.String())+strings.ToLower(c.Result.String()))
		}
		for _, ops := range [][]*pb.RequestOp{t.Success, t.Failure} {
			for _, op := range ops {
				switch {
				case op.GetRequestPut() != nil:
					p := op.GetRequestPut()
					q.Paths, q.Mutating = append(q.Paths, string(p.Key)), true
					if p.Lease != 0 || !p.IgnoreLease && p.IgnoreValue {
						q.Args = append(q.Args, "put-lease")
					} else {
						q.Args = append(q.Args, "put")
					}
				case op.GetRequestDeleteRange() != nil:
					q.Paths, q.Mutating = append(q.Paths, string(op.GetRequestDeleteRange().Key)), true
					q.Args = append(q.Args, "del")
				case op.GetRequestRange() != nil:
					q.Paths = append(q.Paths, string(op.GetRequestRange().Key))
					q.Args = append(q.Args, "get")
				}
			}
		}
	case "Put", "DeleteRange", "LeaseGrant", "LeaseRevoke", "LeaseKeepAlive", "Compact":
		q.Mutating = true
	}
	return q
}
