package nemesis

import (
	"fmt"
	"net/rpc"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/harness/chaos"
)

// Child processes: the test binary started again (chaos.StartChild) with
// envChild set runs ChildMain: a Locker of its own, over a proxy in the
// parent, and workers like the parent's, which stamp their observations
// on the run's clock (its origin comes in the environment) and report them
// to the parent in batches; writes to the fenced resource are calls to
// the parent. The parent freezes (SIGSTOP) and kills the child at random
// moments, and asks it to close its Locker under load.

const (
	envChild   = "NEMESIS_CHILD"  // the child's process name, e.g. C1.2
	envSlot    = "NEMESIS_SLOT"   // its slot, e.g. C1
	envParent  = "NEMESIS_PARENT" // the parent's RPC address
	envTarget  = "NEMESIS_TARGET" // the target's name
	envAddrs   = "NEMESIS_ADDRS"  // the backend's (proxies') addresses
	envCSeed   = "NEMESIS_CHILD_SEED"
	envStream  = "NEMESIS_STREAM"  // the child's random streams start here
	envOrigin  = "NEMESIS_ORIGIN"  // the run's clock origin
	envWorkers = "NEMESIS_WORKERS" // goroutines
	envKeys    = "NEMESIS_KEYS"    // hot keys, comma-separated
)

// IsChild reports whether this process is a nemesis child process.
func IsChild() bool { return os.Getenv(envChild) != "" }

// ---- parent side ----

// childSlot is a client position held by a child process, respawned when
// killed.
type childSlot struct {
	r        *run
	name     string
	proxies  []*chaos.Proxy
	stream   uint64
	busy     atomic.Bool // a freeze, kill or churn holds it
	delays   atomic.Bool // a delay holds its proxies' command connections
	psDelays atomic.Bool // a delay holds their pub/sub connections

	mu     sync.Mutex
	gen    int
	proc   string
	child  *chaos.Child
	client *rpc.Client
}

func (c *childSlot) addrs() []string { return c.r.clientAddrs(c.proxies) }

// spawn starts the slot's next child process.
func (c *childSlot) spawn() error {
	c.mu.Lock()
	c.gen++
	proc := fmt.Sprintf("%s.%d", c.name, c.gen)
	gen := c.gen
	c.mu.Unlock()
	r := c.r
	// The faults the slot's last process armed and did not live to
	// disarm (killed in a refresh with its replies delayed) end with it:
	// else its successor's replies stay late for the rest of the run.
	if r.parent != nil {
		r.parent.disarmSlot(c.name)
	}
	child, addr, err := chaos.StartChild(proc, []string{
		envChild + "=" + proc, envSlot + "=" + c.name, envParent + "=" + r.rpcSrv.Addr().String(),
		envTarget + "=" + r.tg.Name, envAddrs + "=" + strings.Join(c.addrs(), ","),
		envCSeed + "=" + strconv.FormatUint(r.cfg.Seed, 10), envStream + "=" + strconv.FormatUint(c.stream+uint64(100*gen), 10),
		envOrigin + "=" + strconv.FormatInt(r.clk.origin(), 10), envWorkers + "=" + strconv.Itoa(r.cfg.Workers),
		envKeys + "=" + strings.Join(r.env.keys, ","),
	})
	if err != nil {
		return fmt.Errorf("child %s: %w", proc, err)
	}
	client, err := rpc.Dial("tcp", addr)
	if err != nil {
		child.Kill()
		return fmt.Errorf("child %s: %w", proc, err)
	}
	c.mu.Lock()
	c.proc, c.child, c.client = proc, child, client
	c.mu.Unlock()
	r.rec.Event(Event{At: r.clk.Now(), Kind: "spawn", Text: "child process " + proc})
	return nil
}

func (c *childSlot) current() (string, *chaos.Child, *rpc.Client) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.proc, c.child, c.client
}

// call makes an RPC to the child, giving up after d or when it exits.
func (c *childSlot) call(method string, d time.Duration) error {
	_, child, client := c.current()
	if child == nil {
		return fmt.Errorf("no child")
	}
	var reply string
	call := client.Go("Child."+method, true, &reply, make(chan *rpc.Call, 1))
	select {
	case <-call.Done:
		if call.Error != nil {
			return call.Error
		}
		if reply != "" {
			return fmt.Errorf("%s", reply)
		}
		return nil
	case <-child.Exited():
		return fmt.Errorf("child %s exited: %s", child.Name(), child.LogTail())
	case <-time.After(d):
		return fmt.Errorf("child %s: %s took longer than %v", child.Name(), method, d)
	}
}

// freeze stops the child with SIGSTOP for d.
func (c *childSlot) freeze(d time.Duration, stop <-chan struct{}) {
	proc, child, _ := c.current()
	if err := child.Stop(); err != nil {
		c.r.problem("freeze %s: %v", proc, err)
	}
	end := c.r.rec.FaultStart(Fault{Kind: "freeze", Target: proc, Frozen: proc})
	sleepOrStop(d, stop)
	end()
	child.Continue()
}

// kill ends the child with SIGKILL and, after a while, starts the next.
func (c *childSlot) kill(after time.Duration, stop <-chan struct{}) {
	proc, child, client := c.current()
	end := c.r.rec.FaultStart(Fault{Kind: "kill", Target: proc})
	child.Kill()
	client.Close()
	sleepOrStop(after, stop)
	c.r.retry("respawn "+c.name, c.spawn)
	end()
}

// churn has the child close its Locker under load, partitioned if
// partition, and open a new one.
func (c *childSlot) churn(partition bool) {
	if err := c.call("WaitHolding", 5*time.Second); err != nil {
		c.r.problem("churn of %s: %v", c.name, err)
	}
	if partition {
		for _, p := range c.proxies {
			p.Partition()
		}
	}
	// Close (bounded by ReleaseTimeout) while partitioned; open the next
	// Locker once healed, as the parent's slots do: no Locker can connect
	// through a partition.
	err := c.call("CloseLocker", c.r.tg.ReleaseTimeout+10*time.Second)
	if partition {
		healProxies(c.proxies)
	}
	if err != nil {
		c.r.problem("churn of %s: %v", c.name, err)
	}
	if err := c.call("OpenLocker", 70*time.Second); err != nil {
		c.r.problem("churn of %s: %v", c.name, err)
	}
}

// stop has the child stop its workers, close its Locker and report, then
// ends it.
func (c *childSlot) stop() {
	if err := c.call("Stop", c.r.tg.Bound+60*time.Second); err != nil {
		c.r.problem("stop %s: %v", c.name, err)
	}
	c.shutdown()
}

func (c *childSlot) shutdown() {
	_, child, client := c.current()
	if child == nil {
		return
	}
	child.Shutdown(5 * time.Second)
	client.Close()
}

// ParentRPC is the parent's service for its children.
type ParentRPC struct {
	r      *run
	mu     sync.Mutex
	nextID int
	arms   map[int]armed
}

// armed is a fault a child armed: on its slot's proxies, until stop.
type armed struct {
	slot string
	stop func()
}

// disarmSlot ends the faults armed on slot's proxies.
func (p *ParentRPC) disarmSlot(slot string) {
	var stops []func()
	p.mu.Lock()
	for id, a := range p.arms {
		if a.slot == slot {
			stops = append(stops, a.stop)
			delete(p.arms, id)
		}
	}
	p.mu.Unlock()
	for _, stop := range stops {
		stop()
	}
}

// Item is one report of a child: the sink call it stands for.
type Item struct {
	Op        string // grant, unlocking, done, event, violate, ops, stat, fault
	Lease     *LeaseRec
	Event     *Event
	Violation *Violation
	Fault     *Fault
	ID, Text  string
	At, To    Stamp
	N         int
}

// HeldMark is the latest observation of a lease that found it held.
type HeldMark struct {
	At, Deadline Stamp
}

// Batch is a child's reports since its last: items in order, then the
// latest held observations.
type Batch struct {
	Items []Item
	Held  map[string]HeldMark
}

// Report applies a child's batch to the Recorder.
func (p *ParentRPC) Report(b Batch, _ *bool) error {
	rec := p.r.rec
	for _, it := range b.Items {
		switch it.Op {
		case "grant":
			rec.Grant(*it.Lease)
		case "unlocking":
			rec.Unlocking(it.ID, it.At, it.Text)
		case "done":
			rec.Done(it.ID, it.At, it.Text)
		case "event":
			rec.Event(*it.Event)
		case "violate":
			rec.Violate(*it.Violation)
		case "ops":
			rec.Ops(it.N)
		case "stat":
			rec.Stat(it.Text, it.N)
		case "fault":
			rec.Fault(*it.Fault)
		case "starved":
			rec.Starved(it.ID, it.At, it.To)
		}
	}
	for id, h := range b.Held {
		rec.Held(id, h.At, h.Deadline)
	}
	return nil
}

// WriteArgs are a child's write to the fenced resource.
type WriteArgs struct {
	Key, ID string
	Granted Stamp
	Token   uint64
}

// Write is a child's write to the fenced resource.
func (p *ParentRPC) Write(a WriteArgs, ok *bool) error {
	*ok = p.r.rec.Write(a.Key, a.ID, a.Granted, a.Token)
	return nil
}

// ArmArgs ask to lose the replies of the next N requests of Class on the
// proxies of Slot.
type ArmArgs struct {
	Slot, Class string
	N           int
	D           time.Duration
}

// ArmDrop arms a drop rule for a child's worker; Disarm ends it.
func (p *ParentRPC) ArmDrop(a ArmArgs, id *int) error {
	return p.arm(a.Slot, id, func(c *childSlot) func() { return p.r.armDrop(c.proxies, a.Slot, a.Class, a.N) })
}

// ArmDelay delays the replies of Slot's proxies by D for a child's worker;
// Disarm ends it. It sets 0 when a delay is under way there.
func (p *ParentRPC) ArmDelay(a ArmArgs, id *int) error {
	return p.arm(a.Slot, id, func(c *childSlot) func() { return p.r.armDelay(c.proxies, &c.delays, a.Slot, a.D) })
}

// arm arms a fault on the child slot named slot, and sets id to the
// number Disarm ends it with (0: none was armed).
func (p *ParentRPC) arm(slot string, id *int, arm func(c *childSlot) func()) error {
	for _, c := range p.r.children {
		if c.name != slot {
			continue
		}
		*id = 0
		stop := arm(c)
		if stop == nil {
			return nil
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.arms == nil {
			p.arms = map[int]armed{}
		}
		p.nextID++
		p.arms[p.nextID] = armed{slot, stop}
		*id = p.nextID
		return nil
	}
	return fmt.Errorf("no child slot %q", slot)
}

// Disarm ends a rule of ArmDrop.
func (p *ParentRPC) Disarm(id int, _ *bool) error {
	p.mu.Lock()
	a := p.arms[id]
	delete(p.arms, id)
	p.mu.Unlock()
	if a.stop != nil {
		a.stop()
	}
	return nil
}

// ---- child side ----

// rpcSink batches a child's reports to the parent.
type rpcSink struct {
	c *rpc.Client

	mu    sync.Mutex
	items []Item
	held  map[string]HeldMark
	ops   int
}

func (s *rpcSink) add(it Item) {
	s.mu.Lock()
	s.items = append(s.items, it)
	s.mu.Unlock()
}

func (s *rpcSink) Grant(l LeaseRec) { s.add(Item{Op: "grant", Lease: &l}) }
func (s *rpcSink) Held(id string, at, deadline Stamp) {
	s.mu.Lock()
	if h, ok := s.held[id]; !ok || at > h.At {
		s.held[id] = HeldMark{at, deadline}
	}
	s.mu.Unlock()
}
func (s *rpcSink) Unlocking(id string, at Stamp, what string) {
	s.add(Item{Op: "unlocking", ID: id, At: at, Text: what})
}
func (s *rpcSink) Done(id string, at Stamp, errText string) {
	s.add(Item{Op: "done", ID: id, At: at, Text: errText})
}
func (s *rpcSink) Event(e Event)           { s.add(Item{Op: "event", Event: &e}) }
func (s *rpcSink) Violate(v Violation)     { s.add(Item{Op: "violate", Violation: &v}) }
func (s *rpcSink) Stat(name string, n int) { s.add(Item{Op: "stat", Text: name, N: n}) }
func (s *rpcSink) Fault(f Fault)           { s.add(Item{Op: "fault", Fault: &f}) }
func (s *rpcSink) Starved(proc string, from, to Stamp) {
	s.add(Item{Op: "starved", ID: proc, At: from, To: to})
}
func (s *rpcSink) Ops(n int) {
	s.mu.Lock()
	s.ops += n
	s.mu.Unlock()
}

func (s *rpcSink) Write(key, id string, granted Stamp, token uint64) bool {
	// The lease's grant first: the parent judges a refused write by it
	// (a set's member, see setLossLocked).
	s.flush()
	var ok bool
	if err := s.c.Call("Parent.Write", WriteArgs{key, id, granted, token}, &ok); err != nil {
		return false
	}
	return ok
}

// flush sends what was reported since the last flush.
func (s *rpcSink) flush() error {
	s.mu.Lock()
	b := Batch{Items: s.items, Held: s.held}
	if s.ops > 0 {
		b.Items = append(b.Items, Item{Op: "ops", N: s.ops})
	}
	s.items, s.held, s.ops = nil, map[string]HeldMark{}, 0
	s.mu.Unlock()
	if len(b.Items) == 0 && len(b.Held) == 0 {
		return nil
	}
	var ok bool
	return s.c.Call("Parent.Report", b, &ok)
}

// cslot is a child's one slot: its Locker, over the parent's proxy.
type cslot struct {
	env   *procEnv
	name  string // the slot's name, e.g. C1
	addrs []string
	c     *rpc.Client
	lockerSlot
}

func (s *cslot) takeStall() time.Duration { return 0 }

func (s *cslot) armDelay(d time.Duration) func() {
	return s.arm("Parent.ArmDelay", ArmArgs{Slot: s.name, D: d})
}

func (s *cslot) armDrop(class string, n int) func() {
	return s.arm("Parent.ArmDrop", ArmArgs{Slot: s.name, Class: class, N: n})
}

// arm asks the parent to arm a fault on the slot's proxies; the function
// it returns disarms it.
func (s *cslot) arm(method string, a ArmArgs) func() {
	var id int
	if err := s.c.Call(method, a, &id); err != nil || id == 0 {
		return nil
	}
	return func() {
		var ok bool
		s.c.Call("Parent.Disarm", id, &ok)
	}
}

func (s *cslot) openNext() error {
	lk, err := s.env.tg.openRetry(s.addrs, nil, 60*time.Second)
	if err != nil {
		return err
	}
	s.install(lk, func(gen int) string { return fmt.Sprintf("%s/L%d", s.env.proc, gen) })
	return nil
}

func (s *cslot) closeCurrent() error {
	in := s.current()
	if in == nil {
		return nil
	}
	return in.closeAndCheck(s.env)
}

// ChildRPC is a child's service for its parent.
type ChildRPC struct {
	slot    *cslot
	workers *sync.WaitGroup
	once    sync.Once
	finish  func()
}

// WaitHolding waits a little until the child's Locker holds a lease.
func (c *ChildRPC) WaitHolding(_ bool, reply *string) error {
	if in := c.slot.current(); in != nil {
		in.waitHolding(2 * time.Second)
	}
	return nil
}

// CloseLocker closes the child's Locker under load (its workers keep
// calling it until OpenLocker put a new one in).
func (c *ChildRPC) CloseLocker(_ bool, reply *string) error {
	if c.slot.env.stopping() {
		return nil
	}
	c.slot.closeCurrent()
	return nil
}

// OpenLocker opens the child's next Locker.
func (c *ChildRPC) OpenLocker(_ bool, reply *string) error {
	if c.slot.env.stopping() {
		return nil
	}
	if err := c.slot.openNext(); err != nil {
		*reply = err.Error()
	}
	return nil
}

// Stop ends the child's load: workers stop, the Locker closes, every lease
// is seen ended, and everything is reported.
func (c *ChildRPC) Stop(_ bool, reply *string) error {
	c.once.Do(c.finish)
	return nil
}

// ChildMain is a child process's main: it returns the exit code.
func ChildMain() int {
	proc := os.Getenv(envChild)
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "nemesis child %s: "+format+"\n", append([]any{proc}, args...)...)
		return 1
	}
	tg := TargetByName(os.Getenv(envTarget))
	if tg == nil {
		return fail("unknown target %q", os.Getenv(envTarget))
	}
	origin, err := strconv.ParseInt(os.Getenv(envOrigin), 10, 64)
	if err != nil {
		return fail("%s: %v", envOrigin, err)
	}
	seed, _ := strconv.ParseUint(os.Getenv(envCSeed), 10, 64)
	stream, _ := strconv.ParseUint(os.Getenv(envStream), 10, 64)
	nw, _ := strconv.Atoi(os.Getenv(envWorkers))
	pc, err := rpc.Dial("tcp", os.Getenv(envParent))
	if err != nil {
		return fail("dial parent: %v", err)
	}
	clk := NewClock(origin)
	s := &rpcSink{c: pc, held: map[string]HeldMark{}}
	env := &procEnv{proc: proc, clk: clk, sink: s, tg: tg, keys: strings.Split(os.Getenv(envKeys), ","), live: newLiveSet(), stop: make(chan struct{})}
	slot := &cslot{env: env, name: os.Getenv(envSlot), addrs: strings.Split(os.Getenv(envAddrs), ","), c: pc}
	if err := slot.openNext(); err != nil {
		return fail("open: %v", err)
	}
	bg := make(chan struct{})
	var bgWG sync.WaitGroup
	bgWG.Add(3)
	go func() { defer bgWG.Done(); env.live.run(clk, s, 5*time.Millisecond, bg) }()
	go func() { defer bgWG.Done(); canary(proc, clk, s, bg) }()
	go func() { defer bgWG.Done(); every(20*time.Millisecond, bg, func() { s.flush() }) }()
	var wg sync.WaitGroup
	for j := range nw {
		w := newWorker(env, slot, fmt.Sprintf("%s/w%d", proc, j+1), seed, stream+uint64(j))
		wg.Add(1)
		go func() { defer wg.Done(); w.run() }()
	}
	crpc := &ChildRPC{slot: slot, workers: &wg}
	crpc.finish = func() {
		close(env.stop)
		wg.Wait()
		slot.closeCurrent()
		env.live.wait(tg.Bound+3*time.Second, clk, s)
		close(bg)
		bgWG.Wait()
		s.flush()
	}
	srv := rpc.NewServer()
	if err := srv.RegisterName("Child", crpc); err != nil {
		return fail("%v", err)
	}
	cs, err := chaos.ServeRPC(srv)
	if err != nil {
		return fail("%v", err)
	}
	chaos.ChildReady(cs.Addr())
	chaos.WaitForParent()
	return 0
}

func sleepOrStop(d time.Duration, stop <-chan struct{}) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-stop:
	}
}
