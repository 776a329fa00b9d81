package rediswatch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/redis/go-redis/v9"
)

// The plans of the exclusive grant and release, tested without a server:
// from what a transaction read and its request, the step it takes next,
// the commands it queues in its MULTI/EXEC, and what it returns.

// cmdLog records the commands a plan queues, one line each.
type cmdLog []string

func (c *cmdLog) Do(ctx context.Context, args ...any) *redis.Cmd {
	s := make([]string, len(args))
	for i, a := range args {
		if f, ok := a.(float64); ok { // as go-redis writes it
			s[i] = strconv.FormatFloat(f, 'f', -1, 64)
		} else {
			s[i] = fmt.Sprint(a)
		}
	}
	*c = append(*c, strings.Join(s, " "))
	return redis.NewCmd(ctx, args...)
}

const (
	planLK    = "dlock:{k}"
	planMe    = "me"
	planOther = "other"
	planInbox = "dlock:inbox:1"
	planTTL   = 30 * time.Second
)

// planNow is the server's clock in the plans' reads: tokens from it are
// planNow in microseconds.
var planNow = time.UnixMicro(1_700_000_000_000_000)

func got(v string) value { return value{s: v, ok: true} }

func TestGrantStep(t *testing.T) {
	for _, c := range []struct {
		name string
		how  attempt
		r    grantRead
		want grantStep
	}{
		{"free key", tryOnce, grantRead{}, grantNow},
		{"free key, a waiter queued", tryOnce, grantRead{line: []string{planOther}}, grantNow},
		{"held by another", tryOnce, grantRead{holder: got(planOther)}, grantHeld},
		{"own key outside the queue", tryOnce, grantRead{holder: got(planMe)}, grantHeld},
		{"own key, handed over", queued, grantRead{holder: got(planMe)}, grantNow},
		{"held, queued attempt", queued, grantRead{holder: got(planOther)}, grantHeld},
		{"readers' marker", tryOnce, grantRead{holder: got("R")}, grantIfStale},
		{"permits' marker", queued, grantRead{holder: got("S4")}, grantIfStale},
		{"not a permits' marker", tryOnce, grantRead{holder: got("Sx")}, grantHeld},
		{"join: held", tryThenJoin, grantRead{holder: got(planOther)}, grantJoin},
		{"join: free, a waiter queued", tryThenJoin, grantRead{line: []string{planOther + " " + planInbox}}, grantJoin},
		{"join: free, no one queued", tryThenJoin, grantRead{}, grantNow},
	} {
		q := grantReq{how: c.how, lk: planLK, owner: planMe, ttl: planTTL}
		if s := c.r.step(&q); s != c.want {
			t.Errorf("%s: step %d, want %d", c.name, s, c.want)
		}
	}
}

func TestPlanGrant(t *testing.T) {
	const (
		ck    = planLK + ":fence"
		fence = " px 604800000"
		clock = "1700000000000000"
		leave = "lrem dlock:{k}:wq 0 me|lrem dlock:{k}:wq 0 me " + planInbox + "|del dlock:{k}:we:me dlock:{k}:wg:me"
	)
	for _, c := range []struct {
		name        string
		how         attempt
		r           grantRead
		stale, dead string
		token       int64
		next        string
		cmds        string // the commands, separated by "|"
		granted     any    // a reply to the first command that grants
	}{
		{
			name: "free key", how: tryOnce,
			r:     grantRead{counter: got("41")},
			token: planNow.UnixMicro(),
			cmds:  "set dlock:{k} me nx px 30000|set " + ck + " " + clock + fence, granted: "OK",
		},
		{
			name: "free key, counter ahead of the clock", how: tryOnce,
			r:     grantRead{counter: got("1800000000000000")},
			token: 1800000000000001,
			cmds:  "set dlock:{k} me nx px 30000|set " + ck + " 1800000000000001" + fence, granted: "OK",
		},
		{
			name: "dead waiter first in line", how: tryOnce,
			r:    grantRead{line: []string{planOther + " " + planInbox, "third"}},
			dead: planOther + " " + planInbox, token: planNow.UnixMicro(), next: "third",
			cmds: "set dlock:{k} me nx px 30000|set " + ck + " " + clock + fence + "|lrem dlock:{k}:wq 1 other " + planInbox, granted: "OK",
		},
		{
			name: "own key, handed over", how: queued,
			r:     grantRead{holder: got(planMe), counter: got("99"), record: got("42"), line: []string{"third"}},
			token: 42, next: "third",
			cmds: "pexpire dlock:{k} 30000|" + leave, granted: int64(1),
		},
		{
			name: "own key, grant record expired", how: queued,
			r:     grantRead{holder: got(planMe), counter: got("99")},
			token: planNow.UnixMicro(),
			cmds:  "pexpire dlock:{k} 30000|set " + ck + " " + clock + fence + "|" + leave, granted: int64(1),
		},
		{
			name: "free key from the queue", how: queued,
			r:     grantRead{line: []string{planMe + " " + planInbox, "third"}},
			token: planNow.UnixMicro(), next: "third",
			cmds: "set dlock:{k} me nx px 30000|set " + ck + " " + clock + fence + "|" + leave, granted: "OK",
		},
		{
			name: "stale readers' marker", how: tryOnce,
			r:     grantRead{holder: got("R")},
			stale: planLK + ":r", token: planNow.UnixMicro(),
			cmds: "del dlock:{k}:r|set dlock:{k} me px 30000|set " + ck + " " + clock + fence, granted: "OK",
		},
	} {
		c.r.now = planNow
		q := grantReq{how: c.how, lk: planLK, owner: planMe, ttl: planTTL, inbox: planInbox}
		g, err := planGrant(&q, &c.r, c.stale, c.dead)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if g.token != c.token || g.next != c.next {
			t.Errorf("%s: token %d, next %q; want %d, %q", c.name, g.token, g.next, c.token, c.next)
		}
		var log cmdLog
		set := g.queue(context.Background(), &log, &q)
		if want := strings.Split(c.cmds, "|"); !slices.Equal(log, want) {
			t.Errorf("%s: queued\n  %q\nwant\n  %q", c.name, log, want)
		}
		set.SetVal(c.granted)
		if !g.granted(set) {
			t.Errorf("%s: reply %v: not granted", c.name, c.granted)
		}
		set.SetErr(redis.Nil) // a refused SET NX
		if g.granted(set) {
			t.Errorf("%s: a nil reply granted", c.name)
		}
	}
}

// A handed-over key that expired before the EXEC is not granted: PEXPIRE
// replies 0.
func TestPlanGrantOwnKeyExpired(t *testing.T) {
	q := grantReq{how: queued, lk: planLK, owner: planMe, ttl: planTTL}
	r := grantRead{holder: got(planMe), record: got("42"), now: planNow}
	g, err := planGrant(&q, &r, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if g.granted(redis.NewCmdResult(int64(0), nil)) {
		t.Error("PEXPIRE replied 0: granted")
	}
}

func TestPlanGrantBadCounter(t *testing.T) {
	q := grantReq{how: tryOnce, lk: planLK, owner: planMe, ttl: planTTL}
	r := grantRead{counter: got("x"), now: planNow}
	if _, err := planGrant(&q, &r, "", ""); err == nil || !strings.Contains(err.Error(), `"x"`) {
		t.Errorf("counter %q: err %v", "x", err)
	}
}

// The waiter first in line: a dead one's place is taken, a live one
// refuses the attempt, and a permit waiter of another limit refuses a
// permit attempt as invalid.
func TestJudgeFirst(t *testing.T) {
	const head = planOther + " " + planInbox
	var held *driver.HeldError
	if dead, err := judgeFirst(head, false, "", 0); dead != head || err != nil {
		t.Errorf("dead first waiter: (%q, %v), want (%q, nil)", dead, err, head)
	}
	if dead, err := judgeFirst(head, true, "", 0); dead != "" || !errors.As(err, &held) {
		t.Errorf("live first waiter: (%q, %v), want a HeldError", dead, err)
	}
	if _, err := judgeFirst(head, true, "p4:30000 0", 4); !errors.As(err, &held) {
		t.Errorf("live permit waiter of the same limit: %v, want a HeldError", err)
	}
	if _, err := judgeFirst(head, true, "p3:30000 0", 4); !errors.Is(err, driver.ErrInvalid) {
		t.Errorf("live permit waiter of another limit: %v, want ErrInvalid", err)
	}
	if _, err := judgeFirst(head, true, "p3:30000 0", 0); !errors.As(err, &held) {
		t.Errorf("live permit waiter, exclusive attempt: %v, want a HeldError", err)
	}
}

func TestMarkerExpired(t *testing.T) {
	ms := float64(planNow.UnixMilli())
	for _, c := range []struct {
		name   string
		cur    value
		latest []redis.Z
		want   bool
	}{
		{"all expired", got("R"), []redis.Z{{Score: ms - 1}}, true},
		{"no member", got("R"), nil, true},
		{"a live member", got("R"), []redis.Z{{Score: ms}}, false},
		{"marker changed", got("S4"), []redis.Z{{Score: ms - 1}}, false},
		{"key gone", value{}, nil, false},
	} {
		if gone := markerExpired(c.cur, "R", c.latest, planNow); gone != c.want {
			t.Errorf("%s: %v, want %v", c.name, gone, c.want)
		}
	}
}

func TestPlanRelease(t *testing.T) {
	const (
		first    = planOther + " " + planInbox
		del      = "del dlock:{k}"
		wakeAll  = "publish dlock:{k}:rel "
		nameHim  = "publish " + planInbox + " other"
		handOver = "set dlock:{k} other px 20000|set dlock:{k}:fence 1700000000000000 px 604800000|" +
			"lrem dlock:{k}:wq 1 " + first + "|del dlock:{k}:we:other|set dlock:{k}:wg:other 1700000000000000 px 3000|" + nameHim
		// Two holds of one named owner: the same first 16 hex digits.
		hold1 = "0123456789abcdef" + "1111111111111111"
		hold2 = "0123456789abcdef" + "2222222222222222"
	)
	read := func(holder, first, entryOf string, entry value) releaseRead {
		return releaseRead{holder: got(holder), first: first, entryOf: entryOf, entry: entry, counter: got("7"), now: planNow}
	}
	for _, c := range []struct {
		name   string
		q      releaseReq
		r      releaseRead
		action releaseAction
		cmds   string
	}{
		{"held by another", releaseReq{}, read(planOther, "", "", value{}), releaseNotHeld, ""},
		{"gone", releaseReq{}, releaseRead{}, releaseNotHeld, ""},
		{"no one queued", releaseReq{}, read(planMe, "", "", value{}), releaseWakeAll, del + "|" + wakeAll},
		{"no one queued, from the queue", releaseReq{viaQueue: true}, read(planMe, "", "", value{}), releaseWakeAll,
			del + "|del dlock:{k}:wg:me|" + wakeAll},
		{"live waiter first, read", releaseReq{guess: first}, read(planMe, first, planOther, got("20000 0")), releaseHandOver,
			del + "|" + handOver},
		{"waiter first, not read", releaseReq{guess: "third"}, read(planMe, first, "third", got("20000 0")), releaseReadFirst, ""},
		{"dead waiter first", releaseReq{}, read(planMe, first, planOther, value{}), releaseDropDead,
			del + "|lrem dlock:{k}:wq 1 " + first + "|" + wakeAll},
		{"older version's entry", releaseReq{}, read(planMe, first, planOther, got("")), releaseNameFirst, del + "|" + nameHim},
		{"reader first", releaseReq{}, read(planMe, first, planOther, got("s20000 0")), releaseNameFirst, del + "|" + nameHim},
		{"permit waiter first", releaseReq{}, read(planMe, first, planOther, got("p4:20000 0")), releaseNameFirst, del + "|" + nameHim},
		{"reader first, without an inbox", releaseReq{}, read(planMe, planOther, planOther, got("s20000 0")), releaseNameFirst,
			del + "|publish dlock:{k}:rel other"},
		// Holds of a named owner: the key holds the first hold's owner token.
		{"a hold, others left", releaseReq{owner: hold2, hold: true}, releaseRead{holder: got(hold1), ownHold: true, holds: 3}, releaseDropHold, ""},
		{"a hold, not one", releaseReq{owner: hold2, hold: true}, releaseRead{holder: got(hold1), holds: 3}, releaseNotHeld, ""},
		{"a hold, another owner's key", releaseReq{owner: hold2, hold: true}, releaseRead{holder: got(planOther), ownHold: true, holds: 3}, releaseNotHeld, ""},
		{"the last hold", releaseReq{owner: hold2, hold: true}, releaseRead{holder: got(hold1), ownHold: true, holds: 2}, releaseWakeAll,
			del + "|del dlock:{k}:h|hdel dlock:{k}:n " + hold1 + "|" + wakeAll}, // the first hold's note, always
	} {
		c.q.lk = planLK
		if c.q.owner == "" {
			c.q.owner = planMe
		}
		pl, err := planRelease(&c.q, &c.r)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if pl.action != c.action {
			t.Errorf("%s: action %d, want %d", c.name, pl.action, c.action)
			continue
		}
		if c.cmds == "" {
			continue // no transaction of its own
		}
		var log cmdLog
		pl.queue(context.Background(), &log, &c.q, c.r.first, c.r.holder.s)
		if want := strings.Split(c.cmds, "|"); !slices.Equal(log, want) {
			t.Errorf("%s: queued\n  %q\nwant\n  %q", c.name, log, want)
		}
	}
}

func TestPlanReleaseBadCounter(t *testing.T) {
	q := releaseReq{lk: planLK, owner: planMe}
	r := releaseRead{holder: got(planMe), first: planOther, entryOf: planOther, entry: got("20000 0"), counter: got("x"), now: planNow}
	if _, err := planRelease(&q, &r); err == nil {
		t.Error("counter \"x\": no error")
	}
}

// members is what a member attempt reads of the lock key (holder, "" for
// missing, with its PTTL) and the set: the two latest members (top) and
// the limit-th latest (nth).
func members(holder string, pttl time.Duration, top, nth []redis.Z) *memberState {
	get := redis.NewStringResult(holder, nil)
	if holder == "" {
		get = redis.NewStringResult("", redis.Nil)
	}
	return &memberState{
		get:  get,
		pttl: redis.NewDurationResult(pttl, nil),
		now:  redis.NewTimeCmdResult(planNow, nil),
		top:  redis.NewZSliceCmdResult(top, nil),
		nth:  redis.NewZSliceCmdResult(nth, nil),
	}
}

func TestMemberStep(t *testing.T) {
	ms := float64(planNow.UnixMilli())
	live := []redis.Z{{Score: ms + 5000, Member: planOther}}
	for _, c := range []struct {
		name  string
		k     *memberKind
		how   attempt
		r     memberRead
		want  memberStep
		retry time.Duration // a refusal with this hint (-1: without one)
		err   error         // a refusal wrapping this
	}{
		{name: "tombstone present", k: shares, r: memberRead{st: members("", -2, nil, nil), void: true}, retry: -1},
		{name: "share, free key", k: shares, r: memberRead{st: members("", -2, nil, nil)}, want: memberNow},
		{name: "share, readers live", k: shares, r: memberRead{st: members("R", 5*time.Second, live, nil)}, want: memberNow},
		{name: "share, a writer holds", k: shares, r: memberRead{st: members(planOther, 5*time.Second, nil, nil)}, want: memberHeld},
		{name: "share, a writer holds, join", k: shares, how: tryThenJoin, r: memberRead{st: members(planOther, 5*time.Second, nil, nil)}, want: memberJoin},
		{name: "share, free, a waiter queued, join", k: shares, how: tryThenJoin, r: memberRead{st: members("", -2, nil, nil), line: []string{planOther}}, want: memberJoin},
		{name: "permit, room", k: permitsOf(2), r: memberRead{st: members("S2", 5*time.Second, live, nil)}, want: memberNow},
		{name: "permit, full", k: permitsOf(1), r: memberRead{st: members("S1", 5*time.Second, live, live)}, retry: 5001 * time.Millisecond},
		{name: "permit, another limit", k: permitsOf(4), r: memberRead{st: members("S3", 5*time.Second, live, nil)}, err: driver.ErrInvalid},
		{name: "permit, stale marker of another limit", k: permitsOf(4), r: memberRead{st: members("S3", 5*time.Second, []redis.Z{{Score: ms - 1}}, nil)}, want: memberNow},
		{name: "permit, readers hold", k: permitsOf(4), r: memberRead{st: members("R", 5*time.Second, nil, nil)}, want: memberHeld},
	} {
		q := memberReq{k: c.k, how: c.how, lk: planLK, set: c.k.set(planLK), owner: planMe, ttl: planTTL.Milliseconds()}
		step, _, err := c.r.step(&q)
		var held *driver.HeldError
		switch {
		case c.err != nil:
			if !errors.Is(err, c.err) {
				t.Errorf("%s: %v, want %v", c.name, err, c.err)
			}
		case c.retry != 0:
			if !errors.As(err, &held) || held.RetryAfter != max(c.retry, 0) {
				t.Errorf("%s: %v, want a HeldError with RetryAfter %v", c.name, err, max(c.retry, 0))
			}
		case err != nil || step != c.want:
			t.Errorf("%s: (%d, %v), want step %d", c.name, step, err, c.want)
		}
	}
}

func TestPlanMember(t *testing.T) {
	const fence = "set dlock:{k}:fence 1700000000000000 px 604800000"
	ms := float64(planNow.UnixMilli())
	live := []redis.Z{{Score: ms + 40000, Member: planOther}}
	for _, c := range []struct {
		name string
		k    *memberKind
		how  attempt
		r    memberRead
		dead string
		next string
		cmds string
	}{
		{
			name: "share, free key", k: shares, r: memberRead{st: members("", -2, nil, nil)},
			cmds: "set dlock:{k} R px 30000|zremrangebyscore dlock:{k}:r -inf (1700000000000|zadd dlock:{k}:r 1700000030000 me|pexpire dlock:{k}:r 30000|" + fence,
		},
		{
			name: "share, joins readers who outlast it", k: shares, r: memberRead{st: members("R", 40*time.Second, live, nil)},
			cmds: "zremrangebyscore dlock:{k}:r -inf (1700000000000|zadd dlock:{k}:r 1700000030000 me|pexpire dlock:{k}:r 40000|" + fence,
		},
		{
			name: "share from the queue, a waiter behind", k: shares, how: queued,
			r:    memberRead{st: members("", -2, nil, nil), line: []string{planMe, planOther + " " + planInbox}},
			next: planOther + " " + planInbox,
			cmds: "set dlock:{k} R px 30000|zremrangebyscore dlock:{k}:r -inf (1700000000000|zadd dlock:{k}:r 1700000030000 me|pexpire dlock:{k}:r 30000|" + fence +
				"|lrem dlock:{k}:wq 0 me|lrem dlock:{k}:wq 0 me " + planInbox + "|del dlock:{k}:we:me dlock:{k}:wg:me|publish " + planInbox + " other",
		},
		{
			name: "permit, free key, a dead waiter first", k: permitsOf(4),
			r:    memberRead{st: members("", -2, nil, nil), line: []string{planOther, "third"}},
			dead: planOther, next: "third",
			cmds: "del dlock:{k}:s|set dlock:{k} S4 px 30000|zadd dlock:{k}:s 1700000030000 me|pexpire dlock:{k}:s 30000|" + fence + "|lrem dlock:{k}:wq 1 other",
		},
		{
			name: "permit, joins live permits", k: permitsOf(4), r: memberRead{st: members("S4", 20*time.Second, live, nil)},
			cmds: "pexpire dlock:{k} 30000|zremrangebyscore dlock:{k}:s -inf (1700000000000|zadd dlock:{k}:s 1700000030000 me|pexpire dlock:{k}:s 30000|" + fence,
		},
	} {
		q := memberReq{k: c.k, how: c.how, lk: planLK, set: c.k.set(planLK), owner: planMe, ttl: planTTL.Milliseconds(), inbox: planInbox}
		step, g, err := c.r.step(&q)
		if err != nil || step != memberNow {
			t.Errorf("%s: step (%d, %v)", c.name, step, err)
			continue
		}
		m, err := planMember(&q, &c.r, g, c.dead)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if m.token != planNow.UnixMicro() || m.next != c.next {
			t.Errorf("%s: token %d, next %q; want %d, %q", c.name, m.token, m.next, planNow.UnixMicro(), c.next)
		}
		var log cmdLog
		m.queue(context.Background(), &log, &q)
		if want := strings.Split(c.cmds, "|"); !slices.Equal(log, want) {
			t.Errorf("%s: queued\n  %q\nwant\n  %q", c.name, log, want)
		}
	}
}

func TestPlanMemberRelease(t *testing.T) {
	ms := float64(planNow.UnixMilli())
	mine := []redis.Z{{Score: ms + 1000, Member: planMe}}
	both := []redis.Z{{Score: ms + 1000, Member: planMe}, {Score: ms + 2000, Member: planOther}}
	read := func(holder string, top []redis.Z, score float64, line ...string) memberReleaseRead {
		r := memberReleaseRead{st: *members(holder, 0, top, nil), score: score, scored: score != 0, line: line}
		return r
	}
	for _, c := range []struct {
		name   string
		k      *memberKind
		r      memberReleaseRead
		action memberReleaseAction
		held   bool
		cmds   string // memberDeleteLast: queued; memberRemove: the cmds
	}{
		{"no member", shares, read("R", nil, 0), memberNotHeld, false, ""},
		{"the last share", shares, read("R", mine, ms+1000, planOther+" "+planInbox), memberDeleteLast, true,
			"zrem dlock:{k}:r me|del dlock:{k} dlock:{k}:r|publish " + planInbox + " other"},
		{"the last share, no one queued", shares, read("R", mine, ms+1000), memberDeleteLast, true,
			"zrem dlock:{k}:r me|del dlock:{k} dlock:{k}:r|publish dlock:{k}:rel "},
		{"a share, others live", shares, read("R", both, ms+1000, planOther), memberRemove, true,
			"zremrangebyscore dlock:{k}:r -inf (1700000000000|zrem dlock:{k}:r me|zrange dlock:{k}:r 0 0"},
		{"a permit, others live", permitsOf(2), read("S2", both, ms+1000, planOther), memberRemove, true,
			"zremrangebyscore dlock:{k}:s -inf (1700000000000|zrem dlock:{k}:s me|zrange dlock:{k}:s 0 0|publish dlock:{k}:rel other"},
		{"an expired share", shares, read("R", both, ms-1), memberRemove, false,
			"zremrangebyscore dlock:{k}:r -inf (1700000000000|zrem dlock:{k}:r me|zrange dlock:{k}:r 0 0"},
		{"a share, key gone", shares, read("", mine, ms+1000), memberRemove, true, "zrem dlock:{k}:r me"},
		{"a permit, key gone", permitsOf(2), read("", mine, ms+1000), memberRemove, false, "zrem dlock:{k}:s me"},
	} {
		q := memberReleaseReq{k: c.k, lk: planLK, set: c.k.set(planLK), owner: planMe}
		pl := planMemberRelease(&q, &c.r)
		if pl.action != c.action || pl.held != c.held {
			t.Errorf("%s: action %d, held %v; want %d, %v", c.name, pl.action, pl.held, c.action, c.held)
			continue
		}
		var log cmdLog
		switch pl.action {
		case memberDeleteLast:
			pl.queueLast(context.Background(), &log, &q, &c.r)
		case memberRemove:
			for _, cmd := range pl.cmds {
				log.Do(context.Background(), cmd...)
			}
		}
		if want := strings.Split(c.cmds, "|"); c.cmds != "" && !slices.Equal(log, want) {
			t.Errorf("%s: queued\n  %q\nwant\n  %q", c.name, log, want)
		}
	}
}

// A member's release reads its outcome from the replies of its unwatched
// transaction: held only if the ZREM removed the member, and the set left
// empty when ZRANGE finds no one.
func TestMemberReleaseOutcome(t *testing.T) {
	marked := memberReleasePlan{action: memberRemove, held: true, marked: true}
	if o := marked.outcome([]any{int64(0), int64(1), []any{}}); o != (memberReleased{held: true, emptied: true}) {
		t.Errorf("removed, set empty: %+v", o)
	}
	if o := marked.outcome([]any{int64(0), int64(0), []any{"x"}}); o != (memberReleased{}) {
		t.Errorf("already gone, others left: %+v", o)
	}
	bare := memberReleasePlan{action: memberRemove, held: true}
	if o := bare.outcome([]any{int64(1)}); o != (memberReleased{held: true}) {
		t.Errorf("unmarked, removed: %+v", o)
	}
}
