package etcd

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// watcher multiplexes every watch of one Locker over one gRPC Watch
// stream, read by one goroutine (none per lease): a holder's watch on its
// own entry, which ends the lease when the entry is deleted, and a
// waiter's watches on the entries ahead of it, which only wake it. A
// watch starts at the revision after the read that chose it (add), so no
// deletion since that read is missed, or at etcd's current revision,
// with a check of what it may have missed (addNow); only deletions are
// sent (the NOPUT filter). The ids are the client's (WatchCreateRequest.watch_id, etcd
// 3.4 and later).
//
// When the stream fails it is opened again and every watch is created
// again from the revision after the last event it got; meanwhile every
// watch's function is called with deleted false, so waiters check the
// key at once (a holder's renewal finds a deletion it missed). A watch
// whose revision was compacted starts again at the compaction revision,
// and its compacted function (a holder's: checkHolder) reads what the
// watch may have missed.
type watcher struct {
	c     *clientv3.Client
	login *login // nil unless the driver logs in itself

	mu      sync.Mutex
	ws      map[int64]*watch
	next    int64
	stream  pb.Watch_WatchClient // nil while down
	started bool
	closed  bool
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{}
}

// watch is one watched key or range.
type watch struct {
	key, end  string
	rev       int64              // the next revision to watch from; 0: from when etcd creates it
	fn        func(deleted bool) // called without w.mu; must not block
	compacted func()             // nil, or called (on a goroutine of its own) when rev was compacted
	// created, for a watch from when etcd creates it, is called (on a
	// goroutine of its own, with the watcher's context) with the
	// revision its creation reply names: the watch sends every
	// deletion after it.
	created func(ctx context.Context, rev int64)
}

func newWatcher(c *clientv3.Client, login *login) *watcher {
	ctx, cancel := context.WithCancel(context.Background())
	return &watcher{c: c, login: login, ws: map[int64]*watch{}, ctx: ctx, cancel: cancel, done: make(chan struct{})}
}

// add watches deletions of key (of [key, end) when end is set) from
// revision rev on, and returns the watch's id (0 after close).
func (w *watcher) add(key, end string, rev int64, fn func(deleted bool)) int64 {
	return w.addCompacted(key, end, rev, fn, nil)
}

// addCompacted is add, with compacted called when the watch's revision
// was compacted (a deletion before the compaction may have been missed).
func (w *watcher) addCompacted(key, end string, rev int64, fn func(deleted bool), compacted func()) int64 {
	return w.addWatch(&watch{key: key, end: end, rev: rev, fn: fn, compacted: compacted})
}

// addNow watches deletions of key from when etcd creates the watch, and
// calls created with the revision the creation reply names (deletions
// after it are sent). etcd sends a watch made from an earlier revision
// than its current one (one that must catch up from its history) only
// when its sync loop comes round, every 100 ms: on a busy key, where
// every waiter's read is behind by the time its watch is made, that
// bounds each waiter to a grant per 100 ms. A watch from etcd's
// current revision is sent each event as it is committed; created then
// covers the revisions between the waiter's read and the watch.
func (w *watcher) addNow(key string, fn func(deleted bool), created func(ctx context.Context, rev int64)) int64 {
	return w.addWatch(&watch{key: key, fn: fn, created: created})
}

func (w *watcher) addWatch(wt *watch) int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return 0
	}
	w.next++
	id := w.next
	w.ws[id] = wt
	if !w.started {
		w.started = true
		go w.loop()
	} else if w.stream != nil {
		w.sendCreate(id, wt) // a failure is the stream's: loop creates it again
	}
	return id
}

// remove ends the watch id; removing it twice, or 0, is harmless.
func (w *watcher) remove(id int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.ws[id]; !ok {
		return
	}
	delete(w.ws, id)
	if w.stream != nil {
		w.stream.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CancelRequest{
			CancelRequest: &pb.WatchCancelRequest{WatchId: id}}})
	}
}

// sendCreate sends watch id's create request. w.mu held.
func (w *watcher) sendCreate(id int64, wt *watch) error {
	cr := &pb.WatchCreateRequest{
		Key:           []byte(wt.key),
		StartRevision: wt.rev,
		WatchId:       id,
		Filters:       []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NOPUT},
	}
	if wt.end != "" {
		cr.RangeEnd = []byte(wt.end)
	}
	return w.stream.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: cr}})
}

// A stream that failed is opened again after reopenFirst, and after
// twice as long each time one fails with no reply, up to reopenMax (a
// waiter's heartbeat): each failure wakes every waiter, so a stream the
// member refuses at once must not make them step ten times a second.
const (
	reopenFirst = 100 * time.Millisecond
	reopenMax   = time.Second
)

func (w *watcher) loop() {
	defer close(w.done)
	wait := reopenFirst
	for w.ctx.Err() == nil {
		if w.run() {
			wait = reopenFirst
		} else {
			wait = min(2*wait, reopenMax)
		}
		select {
		case <-w.ctx.Done():
		case <-time.After(wait):
		}
	}
}

// run opens the stream, creates every watch on it, and reads it until it
// fails; then it calls every watch's function, so waiters check. It
// reports whether the stream had a reply.
func (w *watcher) run() (answered bool) {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(w.ctx))
	defer cancel()
	s, err := pb.NewWatchClient(w.c.ActiveConnection()).Watch(ctx)
	if err == nil {
		heard := new(atomic.Int64)
		opened := time.Now().UnixNano()
		heard.Store(opened)
		defer func() { answered = heard.Load() != opened }()
		s = heardStream{s, heard}
		go w.watchdog(ctx, cancel, s, heard)
		w.mu.Lock()
		w.stream = s
		for id, wt := range w.ws {
			if err = w.sendCreate(id, wt); err != nil {
				break
			}
		}
		w.mu.Unlock()
		if err == nil {
			w.recv(s)
		}
	}
	w.mu.Lock()
	w.stream = nil
	fns := make([]func(bool), 0, len(w.ws))
	for _, wt := range w.ws {
		fns = append(fns, wt.fn)
	}
	w.mu.Unlock()
	for _, fn := range fns {
		fn(false)
	}
	return answered // set by the deferred check of heard
}

var errWatchCanceled = errors.New("etcd: watch canceled by the server")

// deniedWatch reports whether a watch was cancelled for its rights or
// its token (before 3.4.21 etcd does not tell them apart): "permission
// denied", "invalid auth token", "revision of auth store is old", or
// "user name is empty" (no token: auth was off at the log-in).
func deniedWatch(reason string) bool {
	for _, s := range []string{"permission denied", "auth", "user name is empty"} {
		if strings.Contains(reason, s) {
			return true
		}
	}
	return false
}

// recv reads the stream until it fails.
func (w *watcher) recv(s pb.Watch_WatchClient) error {
	for {
		resp, err := s.Recv()
		if err != nil {
			return err
		}
		if resp.Canceled && resp.WatchId == clientv3.InvalidWatchID {
			// etcd 3.4.21 and later refuse a create (a token or a
			// right refused) with watch id -1, not the id asked for:
			// which watch it was is unknown, so every watch is
			// created again on a new stream
			return w.canceled(resp.CancelReason)
		}
		w.mu.Lock()
		wt := w.ws[resp.WatchId]
		if wt == nil {
			w.mu.Unlock()
			continue
		}
		if resp.Canceled {
			if resp.CompactRevision <= 0 {
				w.mu.Unlock()
				return w.canceled(resp.CancelReason)
			}
			wt.rev = resp.CompactRevision
			err := w.sendCreate(resp.WatchId, wt)
			w.mu.Unlock()
			if err != nil {
				return err
			}
			wt.fn(false)
			if wt.compacted != nil {
				go wt.compacted()
			}
			continue
		}
		if resp.Created && wt.rev == 0 && resp.Header != nil {
			wt.rev = resp.Header.Revision + 1
			if created := wt.created; created != nil {
				wt.created = nil
				go created(w.ctx, resp.Header.Revision)
			}
		}
		deleted := false
		for _, ev := range resp.Events {
			wt.rev = ev.Kv.ModRevision + 1
			deleted = deleted || ev.Type == 1 // mvccpb.DELETE
		}
		fn := wt.fn
		w.mu.Unlock()
		if deleted {
			fn(true)
		}
	}
}

// canceled ends a stream on which the server cancelled a watch (not for
// compaction): run starts over, and every watch is created again.
func (w *watcher) canceled(reason string) error {
	if w.login != nil && deniedWatch(reason) {
		// etcd cancels a watch opened with a stale token (before
		// 3.4.21 as if its user had no right): log in again
		w.login.expire()
	}
	return errWatchCanceled
}

// close ends the stream and the goroutine, and every watch.
func (w *watcher) close() {
	w.mu.Lock()
	w.closed = true
	started := w.started
	w.ws = map[int64]*watch{}
	w.mu.Unlock()
	w.cancel()
	if started {
		<-w.done
	}
}

// A stream whose member went silent with its connection open (a paused
// process, a cut link, a proxy that holds the stream alone) would keep
// every watch on it without news until gRPC's keep-alive closed the
// connection: the watchdog asks for progress every progressEvery, which
// the member answers at once, and starts the stream over (on the next
// member, by round-robin) when it heard nothing for progressSilence.
const (
	progressEvery   = time.Second
	progressSilence = 3 * time.Second
)

// heardStream notes when a reply last came.
type heardStream struct {
	pb.Watch_WatchClient
	heard *atomic.Int64 // Unix nanoseconds
}

func (s heardStream) Recv() (*pb.WatchResponse, error) {
	resp, err := s.Watch_WatchClient.Recv()
	if err == nil {
		s.heard.Store(time.Now().UnixNano())
	}
	return resp, err
}

// watchdog ends the stream s (cancel) once it has been silent for
// progressSilence while it carries a watch, asking for progress every
// progressEvery until ctx ends. (etcd 3.5 and later answer only once
// every watch of the stream caught up: one still catching up is silent
// longer, and the stream starts over, with no event lost.)
func (w *watcher) watchdog(ctx context.Context, cancel context.CancelFunc, s pb.Watch_WatchClient, heard *atomic.Int64) {
	t := time.NewTicker(progressEvery)
	defer t.Stop()
	progress := &pb.WatchRequest{RequestUnion: &pb.WatchRequest_ProgressRequest{ProgressRequest: &pb.WatchProgressRequest{}}}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.mu.Lock()
		idle := len(w.ws) == 0
		if idle {
			heard.Store(time.Now().UnixNano()) // nothing to hear about
		} else if time.Since(time.Unix(0, heard.Load())) > progressSilence {
			w.mu.Unlock()
			cancel()
			return
		}
		if !idle {
			s.Send(progress) // a failure is the stream's: recv sees it
		}
		w.mu.Unlock()
	}
}
