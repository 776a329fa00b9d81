package chaos

import "time"

// delays are how long a kind of connection's requests and replies are
// held before the proxy passes them on.
type delays struct{ req, rep time.Duration }

// The kinds of connection, as indexes of Proxy.delays.
const (
	cmdConn    = 0 // requests and their replies
	pubsubConn = 1 // subscribed: pushes of pub/sub messages
)

// DelayCommands is Delay for command connections only: a connection that
// subscribed (a Redis client's pub/sub connection) is left as it is.
func (p *Proxy) DelayCommands(req, rep time.Duration) {
	p.mu.Lock()
	p.delays[cmdConn] = delays{req, rep}
	p.mu.Unlock()
}

// DelayPubSub holds every frame the server sends on a pub/sub connection
// (one a request subscribed: its messages, and the replies to its
// SUBSCRIBE, UNSUBSCRIBE and PING) for rep before passing it on, in order;
// zero ends the delay. Command connections are left as they are, so a
// Redis client's waiters hear of a release late while its commands are
// answered at once.
func (p *Proxy) DelayPubSub(rep time.Duration) {
	p.mu.Lock()
	p.delays[pubsubConn].rep = rep
	p.mu.Unlock()
}

// HoldReplies makes the proxy hold the reply of each of the next n
// requests that match (n < 0: every one until Stop) for d after the
// server sent it, then deliver it: the request was applied on time, its
// outcome reaches the client late (a grant, after its validity). Later
// replies on the same connection wait behind it, as on a real stream.
// With reply set, only a reply (its frame) that reply accepts is held:
// another passes on time and does not count among the n. Each held
// reply's request is sent on Dropped.
func (p *Proxy) HoldReplies(match func(Request) bool, n int, d time.Duration, reply func(req Request, frame []byte) bool) *DropRule {
	r := &DropRule{p: p, match: match, left: n, hold: max(d, time.Nanosecond), reply: reply, dropped: make(chan Request, 128)}
	p.mu.Lock()
	p.rules = append(p.rules, r)
	p.mu.Unlock()
	return r
}

// delaysLocked are the delays of c's kind. p.mu held.
func (c *pconn) delaysLocked() delays {
	if c.pubsub {
		return c.p.delays[pubsubConn]
	}
	return c.p.delays[cmdConn]
}

// holds reports whether the rule that claimed pd holds frame, the reply:
// if not, the rule gets the claim back. p.mu held.
func (pd *pending) holdsLocked(frame []byte) bool {
	if pd.drop.reply == nil || pd.drop.reply(pd.req, frame) {
		return true
	}
	if pd.drop.left >= 0 {
		pd.drop.left++
	}
	return false
}

// report sends the request of a reply its rule claimed on the rule's
// Dropped channel, unless that is full.
func (pd *pending) report() {
	select {
	case pd.drop.dropped <- pd.req:
	default:
	}
}

// DropPushes makes the proxy lose each of the next n frames (n < 0: every
// one until Stop) that the server sends on a pub/sub connection and that
// answer no request: Redis's pub/sub messages, PostgreSQL's
// NotificationResponses on a LISTEN connection. The frame is taken out
// whole and the connection stays up, so the client never hears of the
// message. Each lost frame is sent on Dropped as a Request whose Cmd is
// "push" and whose Args hold the frame.
func (p *Proxy) DropPushes(n int) *DropRule {
	d := &DropRule{p: p, left: n, dropped: make(chan Request, 128)}
	p.mu.Lock()
	p.pushRules = append(p.pushRules, d)
	p.mu.Unlock()
	return d
}

// pusher is a framer that says which of its frames that answer no
// request are messages DropPushes may lose (the others always pass).
type pusher interface{ push(frame []byte) bool }

// pushRuleLocked claims frame, which answers no request if not answers,
// on a pub/sub connection, for the first DropPushes rule with some left,
// if any. p.mu held.
func (c *pconn) pushRuleLocked(f framer, frame []byte, answers bool) *DropRule {
	if answers || !c.pubsub {
		return nil
	}
	if p, ok := f.(pusher); ok && !p.push(frame) {
		return nil
	}
	for _, d := range c.p.pushRules {
		if d.left != 0 {
			d.left--
			return d
		}
	}
	return nil
}

// reportPush sends a lost push frame on the rule's Dropped channel,
// unless that is full.
func (d *DropRule) reportPush(frame []byte) {
	select {
	case d.dropped <- Request{Cmd: "push", Args: []string{string(frame)}}:
	default:
	}
}
