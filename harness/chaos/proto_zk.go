package chaos

import (
	"bufio"
	"encoding/binary"
)

// zkFramer frames ZooKeeper's jute protocol: length-prefixed packets; the
// first request and reply of a connection are the session handshake; later
// requests carry (xid, opcode), replies (xid, zxid, err); xid -1 marks a
// watch event, which answers no request.
type zkFramer struct {
	sentConnect bool // request side
	gotConnect  bool // reply side
}

var zkOps = map[int32]string{
	0: "notify", 1: "create", 2: "delete", 3: "exists", 4: "getData", 5: "setData",
	6: "getACL", 7: "setACL", 8: "getChildren", 9: "sync", 11: "ping", 12: "getChildren2",
	13: "check", 14: "multi", 15: "create2", 16: "reconfig", 17: "checkWatches",
	18: "removeWatches", 19: "createContainer", 20: "deleteContainer", 21: "createTTL",
	22: "multiRead", 100: "auth", 101: "setWatches", 102: "sasl", 103: "getEphemerals",
	104: "getAllChildrenNumber", 105: "setWatches2", 106: "addWatch", 107: "whoAmI",
	-10: "createSession", -11: "closeSession",
}

var zkMutating = map[int32]bool{1: true, 2: true, 5: true, 7: true, 14: true, 15: true, 16: true, 19: true, 20: true, 21: true, -11: true}

// zkPathOps start their body with a path.
var zkPathOps = map[int32]bool{1: true, 2: true, 3: true, 4: true, 5: true, 6: true, 7: true, 8: true, 9: true,
	12: true, 13: true, 15: true, 18: true, 19: true, 20: true, 21: true, 103: true, 104: true, 106: true}

func readZKPacket(r *bufio.Reader) ([]byte, error) {
	buf, err := readN(r, nil, 4)
	if err != nil {
		return buf, err
	}
	n := int(binary.BigEndian.Uint32(buf))
	if n < 0 || n > 64<<20 {
		return buf, parseErrorf("ZooKeeper: packet length %d", n)
	}
	return readN(r, buf, n)
}

func (f *zkFramer) readRequest(r *bufio.Reader) ([]byte, Request, bool, error) {
	buf, err := readZKPacket(r)
	if err != nil {
		return buf, Request{}, false, err
	}
	if !f.sentConnect {
		f.sentConnect = true
		return buf, Request{Cmd: "connect"}, true, nil
	}
	body := buf[4:]
	if len(body) < 8 {
		return buf, Request{}, false, parseErrorf("ZooKeeper: request of %d bytes", len(body))
	}
	op := int32(binary.BigEndian.Uint32(body[4:8]))
	req := Request{Cmd: zkOps[op], Mutating: zkMutating[op]}
	if req.Cmd == "" {
		req.Cmd = "op?"
	}
	d := &jute{b: body[8:]}
	switch {
	case zkPathOps[op]:
		if p, ok := d.str(); ok {
			req.Paths = []string{p}
		}
	case op == 14:
		req.Paths = d.multiPaths()
	}
	return buf, req, true, nil
}

func (f *zkFramer) readReply(r *bufio.Reader, _ func() *Request) ([]byte, bool, error) {
	buf, err := readZKPacket(r)
	if err != nil {
		return buf, false, err
	}
	if !f.gotConnect {
		f.gotConnect = true
		return buf, true, nil
	}
	if len(buf) < 8 {
		return buf, false, parseErrorf("ZooKeeper: reply of %d bytes", len(buf)-4)
	}
	xid := int32(binary.BigEndian.Uint32(buf[4:8]))
	return buf, xid != -1, nil
}

// jute decodes the few jute fields the proxy needs.
type jute struct{ b []byte }

func (d *jute) int32() (int32, bool) {
	if len(d.b) < 4 {
		return 0, false
	}
	v := int32(binary.BigEndian.Uint32(d.b))
	d.b = d.b[4:]
	return v, true
}

func (d *jute) skip(n int) bool {
	if n < 0 || len(d.b) < n {
		return false
	}
	d.b = d.b[n:]
	return true
}

func (d *jute) bytes() ([]byte, bool) {
	n, ok := d.int32()
	if !ok {
		return nil, false
	}
	if n < 0 {
		return nil, true
	}
	if len(d.b) < int(n) {
		return nil, false
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v, true
}

func (d *jute) str() (string, bool) {
	b, ok := d.bytes()
	return string(b), ok
}

// multiPaths lists the paths of a multi's operations.
func (d *jute) multiPaths() []string {
	var paths []string
	for {
		typ, ok := d.int32()
		if !ok {
			return paths
		}
		if len(d.b) < 5 {
			return paths
		}
		done := d.b[0] != 0
		d.skip(5) // done, err
		if done || typ == -1 {
			return paths
		}
		p, ok := d.str()
		if !ok {
			return paths
		}
		paths = append(paths, p)
		switch typ {
		case 1, 15, 19, 21: // create: data, acl, flags[, ttl]
			if _, ok := d.bytes(); !ok {
				return paths
			}
			n, ok := d.int32()
			if !ok {
				return paths
			}
			for range n {
				d.skip(4)
				d.str()
				d.str()
			}
			d.skip(4)
			if typ == 21 {
				d.skip(8)
			}
		case 2, 13: // delete, check: version
			d.skip(4)
		case 5: // setData: data, version
			d.bytes()
			d.skip(4)
		default:
			return paths
		}
	}
}
