package chaos

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/redis/go-redis/v9"
)

func reader(s string) *bufio.Reader { return bufio.NewReader(strings.NewReader(s)) }

func TestRESPRequests(t *testing.T) {
	f := &respFramer{}
	in := "*3\r\n$3\r\nset\r\n$1\r\nk\r\n$1\r\nv\r\n" +
		"*1\r\n$5\r\nMULTI\r\n" + "*2\r\n$4\r\nINCR\r\n$1\r\nc\r\n" + "*1\r\n$4\r\nEXEC\r\n" +
		"PING\r\n" + "*2\r\n$9\r\nSUBSCRIBE\r\n$2\r\nch\r\n"
	r := reader(in)
	want := []struct {
		cmd      string
		mutating bool
		reply    bool
		frame    string
	}{
		{"SET", true, true, "*3\r\n$3\r\nset\r\n$1\r\nk\r\n$1\r\nv\r\n"},
		{"MULTI", false, true, "*1\r\n$5\r\nMULTI\r\n"},
		{"INCR", false, true, "*2\r\n$4\r\nINCR\r\n$1\r\nc\r\n"}, // queued, not applied
		{"EXEC", true, true, "*1\r\n$4\r\nEXEC\r\n"},
		{"PING", false, true, "PING\r\n"},
		{"SUBSCRIBE", false, false, "*2\r\n$9\r\nSUBSCRIBE\r\n$2\r\nch\r\n"},
	}
	for _, w := range want {
		frame, req, reply, err := f.readRequest(r)
		if err != nil || req.Cmd != w.cmd || req.Mutating != w.mutating || reply != w.reply || string(frame) != w.frame {
			t.Errorf("got %q %+v reply=%v err=%v; want %+v", frame, req, reply, err, w)
		}
	}
}

func TestRESPReplies(t *testing.T) {
	f := &respFramer{}
	frames := []string{
		"+OK\r\n", "$-1\r\n", "*-1\r\n", "_\r\n", ":42\r\n", "$5\r\nhello\r\n",
		"*2\r\n$1\r\na\r\n*1\r\n:1\r\n",
		"%1\r\n+key\r\n~2\r\n:1\r\n:2\r\n",
		"|1\r\n+ttl\r\n:3\r\n+OK\r\n", // an attribute, then the reply it annotates
		">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$0\r\n\r\n",
		"-ERR oops\r\n",
	}
	r := reader(strings.Join(frames, ""))
	for _, want := range frames {
		frame, answers, err := f.readReply(r, nil)
		if err != nil || string(frame) != want || answers != !strings.HasPrefix(want, ">") {
			t.Errorf("got %q answers=%v err=%v; want %q", frame, answers, err, want)
		}
	}
	if _, _, err := f.readReply(reader("?what\r\n"), nil); !isParseError(err) {
		t.Errorf("unknown type: err = %v, want a parse error", err)
	}
}

func TestMemcachedFrames(t *testing.T) {
	var f mcFramer
	r := reader("set k 0 0 3\r\nabc\r\nget a b\r\ncas k 0 5 1 7\r\nx\r\ndelete k noreply\r\n")
	for _, w := range []struct {
		cmd      string
		mutating bool
		reply    bool
	}{{"set", true, true}, {"get", false, true}, {"cas", true, true}, {"delete", true, false}} {
		_, req, reply, err := f.readRequest(r)
		if err != nil || req.Cmd != w.cmd || req.Mutating != w.mutating || reply != w.reply {
			t.Errorf("got %+v reply=%v err=%v; want %+v", req, reply, err, w)
		}
	}
	replies := []struct {
		cmd, frame string
	}{
		{"get", "VALUE a 0 3\r\nabc\r\nVALUE b 0 2 9\r\nxy\r\nEND\r\n"},
		{"gets", "END\r\n"},
		{"get", "SERVER_ERROR busy\r\n"},
		{"stats", "STAT pid 1\r\nSTAT time 2\r\nEND\r\n"},
		{"mg", "VA 2 f0\r\nhi\r\n"},
		{"cas", "EXISTS\r\n"},
	}
	var in string
	for _, x := range replies {
		in += x.frame
	}
	r = reader(in)
	for _, x := range replies {
		req := &Request{Cmd: x.cmd}
		frame, answers, err := f.readReply(r, func() *Request { return req })
		if err != nil || !answers || string(frame) != x.frame {
			t.Errorf("%s: got %q err=%v; want %q", x.cmd, frame, err, x.frame)
		}
	}
}

func zkPacket(parts ...[]byte) string {
	var body []byte
	for _, p := range parts {
		body = append(body, p...)
	}
	return string(binary.BigEndian.AppendUint32(nil, uint32(len(body)))) + string(body)
}

func be32(v int32) []byte  { return binary.BigEndian.AppendUint32(nil, uint32(v)) }
func jstr(s string) []byte { return append(be32(int32(len(s))), s...) }

func TestZooKeeperFrames(t *testing.T) {
	f := &zkFramer{}
	connect := zkPacket(be32(0), make([]byte, 8), be32(2000), make([]byte, 8), jstr("0123456789abcdef"))
	create := zkPacket(be32(1), be32(1), jstr("/chaos/k/_c_owner-lock-"), jstr("data"), be32(0), be32(3))
	exists := zkPacket(be32(2), be32(3), jstr("/chaos/k/_c_owner-lock-0000000001"), []byte{0})
	multi := zkPacket(be32(3), be32(14),
		be32(13), []byte{0}, be32(-1), jstr("/a"), be32(1), // check /a version 1
		be32(2), []byte{0}, be32(-1), jstr("/b"), be32(-1), // delete /b
		be32(-1), []byte{1}, be32(-1))
	r := reader(connect + create + exists + multi)
	for _, w := range []struct {
		cmd      string
		paths    []string
		mutating bool
	}{
		{"connect", nil, false},
		{"create", []string{"/chaos/k/_c_owner-lock-"}, true},
		{"exists", []string{"/chaos/k/_c_owner-lock-0000000001"}, false},
		{"multi", []string{"/a", "/b"}, true},
	} {
		_, req, reply, err := f.readRequest(r)
		if err != nil || !reply || req.Cmd != w.cmd || req.Mutating != w.mutating || !slices.Equal(req.Paths, w.paths) {
			t.Errorf("got %+v reply=%v err=%v; want %+v", req, reply, err, w)
		}
	}
	connected := zkPacket(be32(0), be32(2000), make([]byte, 8), jstr("0123456789abcdef"))
	reply := zkPacket(be32(1), make([]byte, 8), be32(0), jstr("/chaos/k/_c_owner-lock-0000000001"))
	event := zkPacket(be32(-1), make([]byte, 8), be32(0), be32(2), be32(3), jstr("/x"))
	r = reader(connected + reply + event)
	for _, answers := range []bool{true, true, false} {
		if _, got, err := f.readReply(r, nil); err != nil || got != answers {
			t.Errorf("reply: answers=%v err=%v; want %v", got, err, answers)
		}
	}
}

// The proxy between go-redis and a real Redis: a lost reply breaks the
// client's connection after the server applied the command; a partition
// makes commands time out; healing lets them through again.
func TestProxyRedis(t *testing.T) {
	srv := testserver.StartRedis(t, nil)
	p, err := NewProxy(srv.Addr(), RESP)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	opts := &redis.Options{Addr: p.Addr(), MaxRetries: -1, ReadTimeout: 300 * time.Millisecond, DisableIdentity: true}
	c := redis.NewClient(opts)
	defer c.Close()
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer direct.Close()

	rule := p.DropReplies(func(r Request) bool { return r.Cmd == "SET" }, 1)
	if err := c.Set(ctx, "k", "v", 0).Err(); err == nil {
		t.Error("SET whose reply was lost: no error")
	}
	select {
	case req := <-rule.Dropped():
		if req.Cmd != "SET" || !req.Mutating {
			t.Errorf("dropped %+v", req)
		}
	case <-time.After(time.Second):
		t.Error("no reply dropped")
	}
	if v, err := direct.Get(ctx, "k").Result(); v != "v" {
		t.Errorf("the SET was not applied: %q, %v", v, err)
	}
	if err := c.Set(ctx, "k", "w", 0).Err(); err != nil {
		t.Errorf("second SET: %v", err)
	}

	p.Partition()
	if err := c.Get(ctx, "k").Err(); err == nil {
		t.Error("GET during a partition: no error")
	}
	p.Heal()
	if v, err := c.Get(ctx, "k").Result(); err != nil || v != "w" {
		t.Errorf("GET after healing: %q, %v", v, err)
	}
	if errs := p.ParseErrors(); len(errs) > 0 {
		t.Errorf("parse errors: %v", errs)
	}
}

func TestProxyMemcached(t *testing.T) {
	srv := testserver.StartMemcached(t, nil)
	p, err := NewProxy(srv.Addr(), Memcached)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := memcache.New(p.Addr())
	c.Timeout = 300 * time.Millisecond
	defer c.Close()
	direct := memcache.New(srv.Addr())
	defer direct.Close()

	if err := c.Set(&memcache.Item{Key: "a", Value: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	rule := p.DropReplies(mutating, 1)
	if err := c.Add(&memcache.Item{Key: "k", Value: []byte("v")}); err == nil || errors.Is(err, memcache.ErrNotStored) {
		t.Errorf("add whose reply was lost: %v", err)
	}
	if req := <-rule.Dropped(); req.Cmd != "add" {
		t.Errorf("dropped %+v", req)
	}
	if it, err := direct.Get("k"); err != nil || string(it.Value) != "v" {
		t.Errorf("the add was not applied: %v", err)
	}
	if it, err := c.Get("a"); err != nil || string(it.Value) != "1" {
		t.Errorf("get after the lost reply: %v", err)
	}
	if errs := p.ParseErrors(); len(errs) > 0 {
		t.Errorf("parse errors: %v", errs)
	}
}
