package chaos

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
)

type pgMsg interface {
	Encode(dst []byte) ([]byte, error)
}

func pgBytes(t *testing.T, msgs ...pgMsg) string {
	t.Helper()
	var b []byte
	for _, m := range msgs {
		var err error
		if b, err = m.Encode(b); err != nil {
			t.Fatal(err)
		}
	}
	return string(b)
}

// The request side: the untyped first messages, then requests ending at a
// Sync or made of one Query; a Bind's statement is known by the name its
// Parse gave it, until a Close forgets it.
func TestPostgresRequests(t *testing.T) {
	f := &pgFramer{}
	acquire := "SELECT tok, retry, other_lim, voided FROM dlock.acquire($1, $2, $3, $4, $5, $6, $7, $8)"
	type want struct {
		cmd, sql       string
		mutating, subs bool
		reply          bool
		frame          string
	}
	ws := []want{
		{cmd: "sslrequest", reply: true, frame: pgBytes(t, &pgproto3.SSLRequest{})},
		{cmd: "startup", reply: true, frame: pgBytes(t, &pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber, Parameters: map[string]string{"user": "u"}})},
		{cmd: "auth", frame: pgBytes(t, &pgproto3.SASLInitialResponse{AuthMechanism: "SCRAM-SHA-256", Data: []byte("n,,n=,r=x")})},
		{cmd: "prepare", sql: acquire, reply: true, frame: pgBytes(t, &pgproto3.Parse{Name: "stmt_1", Query: acquire}, &pgproto3.Describe{ObjectType: 'S', Name: "stmt_1"}, &pgproto3.Sync{})},
		{cmd: "execute", sql: acquire, mutating: true, reply: true, frame: pgBytes(t, &pgproto3.Bind{PreparedStatement: "stmt_1"}, &pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}, &pgproto3.Sync{})},
		{cmd: "execute", sql: "SELECT 1", mutating: true, reply: true, frame: pgBytes(t, &pgproto3.Parse{Query: "SELECT 1"}, &pgproto3.Bind{}, &pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}, &pgproto3.Sync{})},
		// A pipelined transaction (driver/postgres's steps): every
		// statement it binds, in order.
		{cmd: "execute", sql: "BEGIN; " + acquire + "; COMMIT", mutating: true, reply: true, frame: pgBytes(t,
			&pgproto3.Parse{Query: "BEGIN"}, &pgproto3.Bind{}, &pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{},
			&pgproto3.Parse{Query: acquire}, &pgproto3.Bind{}, &pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{},
			&pgproto3.Parse{Query: "COMMIT"}, &pgproto3.Bind{}, &pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}, &pgproto3.Sync{})},
		{cmd: "query", sql: `LISTEN "dlock"`, subs: true, reply: true, frame: pgBytes(t, &pgproto3.Query{String: `LISTEN "dlock"`})},
		{cmd: "query", sql: "-- ping", reply: true, frame: pgBytes(t, &pgproto3.Query{String: "-- ping"})},
		{cmd: "close", reply: true, frame: pgBytes(t, &pgproto3.Close{ObjectType: 'S', Name: "stmt_1"}, &pgproto3.Sync{})},
		{cmd: "execute", sql: "", mutating: false, reply: true, frame: pgBytes(t, &pgproto3.Bind{PreparedStatement: "stmt_1"}, &pgproto3.Execute{}, &pgproto3.Sync{})},
		{cmd: "terminate", frame: pgBytes(t, &pgproto3.Terminate{})},
	}
	var in string
	for _, w := range ws {
		in += w.frame
	}
	r := reader(in)
	for _, w := range ws {
		frame, req, reply, err := f.readRequest(r)
		if err != nil || req.Cmd != w.cmd || req.SQL != w.sql || req.Mutating != w.mutating || req.Subscribes != w.subs || reply != w.reply || string(frame) != w.frame {
			t.Errorf("got %q %+v reply=%v err=%v; want %+v", frame, req, reply, err, w)
		}
	}
	if _, _, _, err := (&pgFramer{started: true}).readRequest(reader("?\x00\x00\x00\x04")); !isParseError(err) {
		t.Errorf("unknown message type: err = %v, want a parse error", err)
	}
	if _, req, reply, err := (&pgFramer{}).readRequest(reader(pgBytes(t, &pgproto3.CancelRequest{ProcessID: 1, SecretKey: []byte{0, 0, 0, 2}}))); err != nil || req.Cmd != "cancel" || reply {
		t.Errorf("CancelRequest: %+v reply=%v err=%v", req, reply, err)
	}
}

// The reply side: a reply runs to ReadyForQuery; an authentication
// request, and what comes while no request awaits a reply, pass alone;
// so does a notification before a reply; an SSLRequest's answer is one
// byte; a FATAL error ends the reply.
func TestPostgresReplies(t *testing.T) {
	f := &pgFramer{}
	startup, query, ssl := &Request{Cmd: "startup"}, &Request{Cmd: "execute"}, &Request{Cmd: "sslrequest"}
	notify := pgBytes(t, &pgproto3.NotificationResponse{PID: 7, Channel: "dlock", Payload: "0123"})
	cases := []struct {
		req     *Request
		frame   string
		answers bool
	}{
		{ssl, "N", true},
		{startup, pgBytes(t, &pgproto3.AuthenticationSASL{AuthMechanisms: []string{"SCRAM-SHA-256"}}), false},
		{startup, pgBytes(t, &pgproto3.AuthenticationSASLFinal{Data: []byte("v=x")}), false},
		{startup, pgBytes(t, &pgproto3.AuthenticationOk{}, &pgproto3.ParameterStatus{Name: "a", Value: "b"}, &pgproto3.BackendKeyData{ProcessID: 1, SecretKey: []byte{0, 0, 0, 2}}, &pgproto3.ReadyForQuery{TxStatus: 'I'}), true},
		{query, notify, false},
		{query, pgBytes(t, &pgproto3.BindComplete{}, &pgproto3.DataRow{Values: [][]byte{{0, 0, 0, 0, 0, 0, 0, 9}, []byte("0"), nil}}, &pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")}, &pgproto3.ReadyForQuery{TxStatus: 'I'}), true},
		{nil, notify, false},
		{query, pgBytes(t, &pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "57P01", Message: "terminating connection due to administrator command"}), true},
	}
	var in string
	for _, c := range cases {
		in += c.frame
	}
	r := reader(in)
	for i, c := range cases {
		frame, answers, err := f.readReply(r, func() *Request { return c.req })
		if err != nil || string(frame) != c.frame || answers != c.answers {
			t.Errorf("case %d: got %q answers=%v err=%v; want %q answers=%v", i, frame, answers, err, c.frame, c.answers)
		}
	}
	if _, _, err := f.readReply(reader("S"), func() *Request { return ssl }); !isParseError(err) {
		t.Errorf("SSL accepted: err = %v, want a parse error (the proxy cannot read TLS)", err)
	}
	rows := PostgresRows([]byte(cases[5].frame))
	if len(rows) != 1 || len(rows[0]) != 3 || rows[0][2] != nil {
		t.Fatalf("PostgresRows: %q", rows)
	}
	if v, ok := PostgresInt(rows[0][0]); !ok || v != 9 {
		t.Errorf("binary int8: %d %v", v, ok)
	}
	if v, ok := PostgresInt(rows[0][1]); !ok || v != 0 {
		t.Errorf("text 0: %d %v", v, ok)
	}
	if v, ok := PostgresInt([]byte("1750000000000000")); !ok || v != 1750000000000000 {
		t.Errorf("text token: %d %v", v, ok)
	}
	if ch, payload, ok := PostgresNotification([]byte(notify)); !ok || ch != "dlock" || payload != "0123" {
		t.Errorf("PostgresNotification: %q %q %v", ch, payload, ok)
	}
	if !f.push([]byte(notify)) || f.push([]byte(pgBytes(t, &pgproto3.ParameterStatus{Name: "a", Value: "b"}))) {
		t.Error("push: a notification is one, a ParameterStatus is not")
	}
	localized := pgBytes(t, &pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "ERROR", Code: "42501"})
	if pgFatal([]byte(localized)[5:]) {
		t.Error("pgFatal trusted the localized severity over V")
	}
}

// Through the proxy, against a real server, with pgx: SCRAM
// authentication passes; the request of a statement prepared earlier on
// the connection carries its SQL; a lost reply is the one of the request
// chosen, which the server ran; a held reply comes late; a LISTEN
// connection's notifications are delayed apart from the commands, and
// can be lost whole, the connection going on; a partition cuts clients
// off until Heal.
func TestPostgresProxy(t *testing.T) {
	srv := StartServer(t, PostgresBackend, ServerOptions{})
	p, err := NewProxy(srv.Addrs[0], PostgreSQL)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	connect := func(addr string) *pgx.Conn {
		t.Helper()
		c, err := pgx.Connect(ctx, PostgresURL(addr, ""))
		if err != nil {
			t.Fatalf("connect to %s: %v", addr, err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		return c
	}
	direct := connect(srv.Addrs[0])
	if _, err := direct.Exec(ctx, "CREATE SCHEMA proxytest; CREATE TABLE proxytest.proxied (n int)"); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var seen []Request
	p.DropReplies(func(r Request) bool {
		mu.Lock()
		seen = append(seen, r)
		mu.Unlock()
		return false
	}, -1)
	c := connect(p.Addr())
	var n int
	for i := range 2 {
		if err := c.QueryRow(ctx, "SELECT $1::int + 1", i).Scan(&n); err != nil || n != i+1 {
			t.Fatalf("query through the proxy: %d, %v", n, err)
		}
	}
	mu.Lock()
	var kinds []string
	for _, r := range seen {
		if r.SQL == "SELECT $1::int + 1" {
			kinds = append(kinds, r.Cmd)
		}
	}
	mu.Unlock()
	if want := []string{"prepare", "execute", "execute"}; !slices.Equal(kinds, want) {
		t.Errorf("requests of the statement: %v, want %v (the second execute names it by its prepared name)", kinds, want)
	}

	// A lost reply: the INSERT ran, its reply never came.
	insert := func(r Request) bool {
		return r.Cmd == "execute" && strings.HasPrefix(r.SQL, "INSERT INTO proxytest.proxied")
	}
	if _, err := c.Exec(ctx, "INSERT INTO proxytest.proxied VALUES ($1)", 0); err != nil { // prepared
		t.Fatal(err)
	}
	rule := p.DropReplies(insert, 1)
	if _, err := c.Exec(ctx, "INSERT INTO proxytest.proxied VALUES ($1)", 1); err == nil {
		t.Error("the INSERT whose reply was lost succeeded")
	}
	select {
	case r := <-rule.Dropped():
		if !insert(r) {
			t.Errorf("lost the reply of %+v", r)
		}
	default:
		t.Error("no reply lost")
	}
	var count int
	if err := direct.QueryRow(ctx, "SELECT count(*) FROM proxytest.proxied WHERE n = 1").Scan(&count); err != nil || count != 1 {
		t.Errorf("the INSERT whose reply was lost: %d rows, %v; want 1: the server ran it", count, err)
	}

	// A held reply.
	c = connect(p.Addr())
	const hold = 500 * time.Millisecond
	p.HoldReplies(insert, 1, hold, nil)
	start := time.Now()
	if _, err := c.Exec(ctx, "INSERT INTO proxytest.proxied VALUES ($1)", 2); err != nil || time.Since(start) < hold {
		t.Errorf("a held INSERT: %v after %v, want success after %v", err, time.Since(start), hold)
	}

	// Notifications: delayed apart from the commands, then lost.
	ln := connect(p.Addr())
	if _, err := ln.Exec(ctx, `LISTEN "dlock"`); err != nil {
		t.Fatal(err)
	}
	p.DelayPubSub(hold)
	start = time.Now()
	if _, err := direct.Exec(ctx, "SELECT pg_notify('dlock', 'one')"); err != nil {
		t.Fatal(err)
	}
	if err := c.QueryRow(ctx, "SELECT 1").Scan(&n); err != nil || time.Since(start) > hold/2 {
		t.Errorf("a command under DelayPubSub: %v after %v", err, time.Since(start))
	}
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	msg, err := ln.WaitForNotification(wctx)
	wcancel()
	if err != nil || msg.Payload != "one" || time.Since(start) < hold {
		t.Errorf("a delayed notification: %+v, %v after %v; want 'one' after %v", msg, err, time.Since(start), hold)
	}
	p.DelayPubSub(0)
	lost := p.DropPushes(1)
	for _, m := range []string{"two", "three"} {
		if _, err := direct.Exec(ctx, "SELECT pg_notify('dlock', $1)", m); err != nil {
			t.Fatal(err)
		}
	}
	wctx, wcancel = context.WithTimeout(ctx, 5*time.Second)
	msg, err = ln.WaitForNotification(wctx)
	wcancel()
	if err != nil || msg.Payload != "three" {
		t.Errorf("after a lost notification: %+v, %v; want 'three' on the same connection", msg, err)
	}
	select {
	case r := <-lost.Dropped():
		if _, payload, ok := PostgresNotification([]byte(r.Args[0])); !ok || payload != "two" {
			t.Errorf("lost %q, want the notification 'two'", r.Args[0])
		}
	default:
		t.Error("no notification lost")
	}

	// A partition, then Heal.
	p.Partition()
	pctx, pcancel := context.WithTimeout(ctx, 500*time.Millisecond)
	err = c.QueryRow(pctx, "SELECT 1").Scan(&n)
	pcancel()
	if !errors.Is(err, context.DeadlineExceeded) && !pgconnTimeout(err) {
		t.Errorf("a query during a partition: %v, want a timeout", err)
	}
	p.Heal()
	c = connect(p.Addr())
	if err := c.QueryRow(ctx, "SELECT 2").Scan(&n); err != nil || n != 2 {
		t.Errorf("after Heal: %d, %v", n, err)
	}
	if errs := p.ParseErrors(); len(errs) > 0 {
		t.Errorf("parse errors: %v", errs)
	}
}

func pgconnTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

func TestRequestName(t *testing.T) {
	for _, c := range []struct {
		r    Request
		want string
	}{
		{Request{Cmd: "EVALSHA"}, "EVALSHA"},
		{Request{Cmd: "execute", SQL: "SELECT tok FROM dlock.acquire($1, $2)"}, "execute:dlock.acquire"},
		{Request{Cmd: "query", SQL: `LISTEN "dlock"`}, "query:LISTEN"},
	} {
		if got := c.r.Name(); got != c.want {
			t.Errorf("%+v: Name %q, want %q", c.r, got, c.want)
		}
	}
}
