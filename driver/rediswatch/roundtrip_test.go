package rediswatch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/lock"
	"github.com/redis/go-redis/v9"
)

// recorder is a go-redis hook that records every round trip (a command or
// a pipeline) with the names of its commands.
type recorder struct {
	mu    sync.Mutex
	trips []string
}

func (r *recorder) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (r *recorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.add(cmd)
		return next(ctx, cmd)
	}
}

func (r *recorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.add(cmds...)
		return next(ctx, cmds)
	}
}

func (r *recorder) add(cmds ...redis.Cmder) {
	names := make([]string, len(cmds))
	setup := true
	for i, c := range cmds {
		names[i] = c.FullName()
		switch c.Name() {
		case "hello", "client", "cluster":
		default:
			setup = false
		}
	}
	if setup {
		return // a new connection's set-up (a Locker's lanes dial their own)
	}
	r.mu.Lock()
	r.trips = append(r.trips, strings.Join(names, " "))
	r.mu.Unlock()
}

// take returns the round trips recorded since the last call.
func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.trips
	r.trips = nil
	return t
}

// check fails t unless the round trips recorded since the last take or
// check are want, made by what.
func (r *recorder) check(t *testing.T, what string, want ...string) {
	t.Helper()
	if got := r.take(); !slices.Equal(got, want) {
		t.Errorf("%s: round trips\n  %q\nwant\n  %q", what, got, want)
	}
}

// recordedDriver returns a driver over a client of the shared server, the
// client, and the recorder of the client's round trips, with none recorded
// yet.
func recordedDriver(t *testing.T) (*watchDriver, *redis.Client, *recorder) {
	rec := &recorder{}
	rdb := recorded(t, standalone(t), rec)
	if err := rdb.Ping(testCtx(t)).Err(); err != nil {
		t.Fatal(err)
	}
	d := testDriver(rdb, DefaultPrefix)
	t.Cleanup(func() { d.Close() })
	rec.take()
	return d, rdb, rec
}

// Every operation takes the round trips docs/wire/redis.md says ("rediswatch
// transactions"), made of the commands it lists, and no script command
// ever.
func TestRoundTrips(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := testCtx(t)
		rec := &recorder{}
		switch c := rdb.(type) {
		case *redis.Client:
			addHook(c, rec)
		case *redis.ClusterClient:
			// Transactions run on the node clients.
			c.OnNewNode(func(n *redis.Client) { n.AddHook(rec) })
			addHook(c, rec)
			c.ReloadState(ctx)
		}
		if err := rdb.Ping(ctx).Err(); err != nil { // connect, load the slot map
			t.Fatal(err)
		}
		l, d := newTestLocker(t, rdb, nil)
		other, _ := newTestLocker(t, rdb, nil)
		k := testKey(t)
		// Warm up: the first grant also seeds the counter, and the Cluster
		// client may still be learning its nodes.
		lease, err := l.TryLock(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		lease.Unlock(ctx)
		rec.take()

		check := func(what string, want ...string) { t.Helper(); rec.check(t, what, want...) }
		lease, err = l.TryLock(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		check("grant", "watch get get time lrange", "multi set set exec")
		if _, err := other.TryLock(ctx, k); !errors.Is(err, lock.ErrNotAcquired) {
			t.Fatalf("TryLock on a held key: %v", err)
		}
		check("grant of a held key", "watch get get time lrange", "unwatch pttl")
		// A refresh lengthens the key; one to a shorter TTL leaves it as
		// it is, without a transaction.
		if err := lease.Refresh(ctx, lock.DefaultTTL+time.Second); err != nil {
			t.Fatal(err)
		}
		check("refresh", "watch get pttl", "multi pexpire exec")
		if err := lease.Refresh(ctx, lock.DefaultTTL/2); err != nil {
			t.Fatal(err)
		}
		check("refresh to a shorter TTL", "watch get pttl", "unwatch")
		if err := lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		check("release", "watch get lrange", "multi del publish exec")
		if err := d.Release(ctx, &driverLease{Key: k, Owner: "not-the-owner", Token: 1}); !errors.Is(err, driver.ErrNotHeld) {
			t.Fatalf("Release by a stranger: %v", err)
		}
		check("release by a stranger", "watch get lrange", "unwatch")
		stray := &driverLease{Key: k, Owner: "not-the-owner", TTL: lock.DefaultTTL, Data: execSent{}}
		if err := d.Release(ctx, stray); !errors.Is(err, driver.ErrNotHeld) {
			t.Fatalf("clean-up Release: %v", err)
		}
		check("clean-up after a lost grant reply", "watch set get lrange", "unwatch")

		if _, ok := rdb.(*redis.Client); ok {
			// A batch refresh covers every lease in two round trips.
			var ls []*lock.Lease
			for range 3 {
				lease, err := l.TryLock(ctx, testKey(t))
				if err != nil {
					t.Fatal(err)
				}
				ls = append(ls, lease)
			}
			dls := make([]*driverLease, len(ls))
			for i, lease := range ls {
				dls[i] = &driverLease{Key: lease.Key(), Owner: ownerOf(t, rdb, lease.Key())}
			}
			rec.take()
			batch := func(what string, ttl time.Duration, tx string) {
				t.Helper()
				_, errs := d.RefreshBatch(ctx, dls, ttl)
				for i, err := range errs {
					if err != nil {
						t.Errorf("%s: lease %d: %v", what, i, err)
					}
				}
				check(what, "watch mget", tx)
			}
			// PEXPIRE ... GT leaves a key that lasts longer as it is.
			batch("batch refresh of 3", lock.DefaultTTL+time.Second, "multi pexpire pexpire pexpire exec")
			batch("batch refresh of 3 to a shorter TTL", lock.DefaultTTL/2, "multi pexpire pexpire pexpire exec")
		}
	})
}

// ownerOf reads the owner token a lock key holds.
func ownerOf(t *testing.T, rdb redis.UniversalClient, key string) string {
	t.Helper()
	v, err := rdb.Get(context.Background(), DefaultPrefix+"{"+key+"}").Result()
	if err != nil {
		t.Fatalf("GET lock key of %q: %v", key, err)
	}
	return v
}

// The transactions of shares and permits (member grants) take the round
// trips and commands docs/wire/redis.md lists, in each of their branches:
// grants onto a free key, beside longer and shorter members, onto a key
// held otherwise; refreshes that lengthen the lock key or not; Resume;
// releases of the longest member, of a shorter one, of the last one, and by
// a stranger, of a member whose lock key was deleted, and of one that finds
// the set emptied meanwhile. (TestPermitRoundTrips covers the permits' main
// line.)
func TestMemberRoundTrips(t *testing.T) {
	d, rdb, rec := recordedDriver(t)
	ctx := testCtx(t)
	// helpers returns the check of the round trips and the check of an
	// error, for subtest t.
	helpers := func(t *testing.T) (check func(what string, want ...string), must func(err error)) {
		check = func(what string, want ...string) { t.Helper(); rec.check(t, what, want...) }
		must = func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		return check, must
	}

	// A member's refresh and resume: the read, then the transaction.
	const (
		refresh = "get time zscore"
		extend  = "unwatch multi zscore time zadd pexpire pexpire get exec"
	)

	t.Run("shared", func(t *testing.T) {
		check, must := helpers(t)
		k := testKey(t)
		share := func(ttl time.Duration) *driver.Lease {
			return &driver.Lease{Key: k, Owner: owner(), Mode: driver.Shared, TTL: ttl}
		}
		rec.take()
		const (
			read    = "watch get pttl time zrange get lrange exists"
			release = "watch get time zrange zscore lrange"
		)
		a, b, c := share(20*time.Second), share(10*time.Second), share(30*time.Second)
		must(d.Acquire(ctx, a))
		check("grant on a free key", read, "multi set zremrangebyscore zadd pexpire set exec")
		must(d.Acquire(ctx, b))
		check("grant beside a longer share", read, "multi zremrangebyscore zadd pexpire set exec")
		must(d.Acquire(ctx, c))
		check("grant beside shorter shares", read, "multi set zremrangebyscore zadd pexpire set exec")
		// A refresh lengthens the lock key and the set (PEXPIRE ... GT),
		// never shortens them.
		lkPTTL := func() time.Duration { t.Helper(); v := rdb.PTTL(ctx, d.LockKey(k)).Val(); rec.take(); return v }
		_, err := d.Refresh(ctx, b, 10*time.Second)
		must(err)
		check("refresh within the lock key's PTTL", refresh, extend)
		if pttl := lkPTTL(); pttl < 25*time.Second {
			t.Errorf("lock key PTTL %v after a refresh to 10s beside a share of 30s; want it kept", pttl)
		}
		_, err = d.Refresh(ctx, b, 40*time.Second)
		must(err)
		check("refresh past the lock key's PTTL", refresh, extend)
		if pttl := lkPTTL(); pttl < 39*time.Second {
			t.Errorf("lock key PTTL %v after a refresh to 40s; want 40s", pttl)
		}
		resume := *a
		must(d.Resume(ctx, &resume))
		check("resume", refresh+" get", extend, "hexists pttl") // whether it has a note (notes.go)
		if err := d.Release(ctx, share(time.Second)); !errors.Is(err, driver.ErrNotHeld) {
			t.Fatalf("release by a stranger: %v", err)
		}
		rec.take() // a stranger's lease has no token: no round trip
		stranger := share(time.Second)
		stranger.Token = 1
		if err := d.Release(ctx, stranger); !errors.Is(err, driver.ErrNotHeld) {
			t.Fatalf("release by a stranger: %v", err)
		}
		check("release by a stranger", release, "unwatch")
		pttl := rdb.PTTL(ctx, d.LockKey(k)).Val()
		rec.take()
		must(d.Release(ctx, b))
		check("release of the longest share", release, "unwatch multi zremrangebyscore zrem zrange exec")
		// The lock key keeps its PX: no release shortens it (it covers the
		// shares left, as it covered b).
		if left := rdb.PTTL(ctx, d.LockKey(k)).Val(); left < pttl-time.Second {
			t.Errorf("lock key PTTL %v after the longest share's release, was %v; want it kept", left, pttl)
		}
		rec.take()
		must(d.Release(ctx, a))
		check("release of a shorter share", release, "unwatch multi zremrangebyscore zrem zrange exec")
		must(d.Release(ctx, c))
		check("release of the last share", release, "multi zrem del publish exec")
		// A share whose lock key was deleted: its member is removed, and
		// the key left alone.
		gone := share(10 * time.Second)
		must(d.Acquire(ctx, gone))
		rdb.Del(ctx, d.LockKey(k))
		rec.take()
		must(d.Release(ctx, gone))
		check("release of a share whose lock key was deleted", release, "unwatch multi zrem exec")
		w := &driver.Lease{Key: k, Owner: owner(), TTL: 10 * time.Second}
		must(d.Acquire(ctx, w))
		rec.take()
		if err := d.Acquire(ctx, share(time.Second)); !errors.Is(err, driver.ErrHeld) {
			t.Fatalf("a share of a key a writer holds: %v", err)
		}
		check("grant of a key a writer holds", read, "unwatch pttl")
		must(d.Release(ctx, w))
	})

	t.Run("permit", func(t *testing.T) {
		check, must := helpers(t)
		k := testKey(t)
		permit := func(limit int, ttl time.Duration) *driver.Lease {
			return &driver.Lease{Key: k, Owner: owner(), Mode: driver.Permit, Limit: limit, TTL: ttl}
		}
		rec.take()
		const (
			read    = "watch get pttl time zrange zrange get lrange exists"
			release = "watch get time zrange zscore lrange"
		)
		a, b, c := permit(3, 10*time.Second), permit(3, 20*time.Second), permit(3, 5*time.Second)
		must(d.Acquire(ctx, a))
		check("grant on a free key", read, "multi del set zadd pexpire set exec")
		must(d.Acquire(ctx, b))
		check("grant beside a shorter permit", read, "multi pexpire zremrangebyscore zadd pexpire set exec")
		must(d.Acquire(ctx, c))
		check("grant beside longer permits", read, "multi zremrangebyscore zadd pexpire set exec")
		if err := d.Acquire(ctx, permit(2, time.Second)); !errors.Is(err, driver.ErrInvalid) {
			t.Fatalf("a permit of another limit: %v", err)
		}
		check("grant of another limit", read, "unwatch")
		_, err := d.Refresh(ctx, c, 5*time.Second)
		must(err)
		check("refresh", refresh, extend)
		resume := *a
		must(d.Resume(ctx, &resume))
		check("resume", refresh+" get", extend, "hexists pttl") // whether it has a note (notes.go)
		stranger := permit(3, time.Second)
		stranger.Token = 1
		if err := d.Release(ctx, stranger); !errors.Is(err, driver.ErrNotHeld) {
			t.Fatalf("release by a stranger: %v", err)
		}
		check("release by a stranger", release, "unwatch")
		must(d.Release(ctx, c))
		check("release of a shorter permit", release, "unwatch multi zremrangebyscore zrem zrange publish exec")
		must(d.Release(ctx, b))
		check("release of the longest permit", release, "unwatch multi zremrangebyscore zrem zrange publish exec")
		must(d.Release(ctx, a))
		check("release of the last permit", release, "multi zrem del publish exec")
		// Two permits, one of which goes (here, is deleted) between the
		// other's read and its EXEC: that release finds the set empty and
		// deletes the key in a transaction of its own.
		a, b = permit(3, 10*time.Second), permit(3, 10*time.Second)
		must(d.Acquire(ctx, a))
		must(d.Acquire(ctx, b))
		admin := standalone(t) // not recorded
		vanish := func(op, lk string) {
			if op == "release" {
				admin.ZRem(context.Background(), permitsKey(lk), b.Owner)
			}
		}
		d.beforeExec.Store(&vanish)
		rec.take()
		err = d.Release(ctx, a)
		d.beforeExec.Store(nil)
		must(err)
		check("release that leaves the set empty", release, "unwatch multi zremrangebyscore zrem zrange publish exec",
			"watch get time zrange lrange", "multi del publish exec")
		assertGone(t, rdb, "after the release that emptied the set", d.LockKey(k), permitsKey(d.LockKey(k)))
		w := &driver.Lease{Key: k, Owner: owner(), TTL: 10 * time.Second}
		must(d.Acquire(ctx, w))
		rec.take()
		if err := d.Acquire(ctx, permit(3, time.Second)); !errors.Is(err, driver.ErrHeld) {
			t.Fatalf("a permit of a key a writer holds: %v", err)
		}
		check("grant of a key a writer holds", read, "unwatch pttl")
		must(d.Release(ctx, w))
	})
}

// A member's refresh reads without WATCH, so its transaction may run after
// the member or its lock key changed; it then returns ErrNotHeld, and
// leaves no member that holds nothing: a member removed meanwhile (as a
// grant that counted it expired removes it) is not taken back; one that
// expired by the EXEC (a grant may have counted it out), or whose lock key
// went to another grant, is removed again.
func TestMemberRefreshRaces(t *testing.T) {
	d, _, rec := recordedDriver(t)
	ctx := testCtx(t)
	admin := standalone(t) // not recorded
	const (
		refresh = "get time zscore"
		extend  = "unwatch multi zscore time zadd pexpire pexpire get exec"
		drop    = "unwatch multi zrem zrange exec"
	)
	race := func(f func(lk string)) {
		hook := func(op, lk string) {
			if op == "refresh" {
				f(lk)
			}
		}
		d.beforeExec.Store(&hook)
	}
	t.Cleanup(func() { d.beforeExec.Store(nil) })

	k := testKey(t)
	lk := d.LockKey(k)
	sk := permitsKey(lk)
	ls := make([]*driver.Lease, 3)
	for i := range ls {
		ls[i] = &driver.Lease{Key: k, Owner: owner(), Mode: driver.Permit, Limit: 3, TTL: 10 * time.Second}
		if err := d.Acquire(ctx, ls[i]); err != nil {
			t.Fatal(err)
		}
	}
	a, b, c := ls[0], ls[1], ls[2]
	gone := func(what string, l *driver.Lease) {
		t.Helper()
		if err := admin.ZScore(ctx, sk, l.Owner).Err(); !errors.Is(err, redis.Nil) {
			t.Errorf("%s: the member is in the set (ZSCORE err %v), want it gone", what, err)
		}
	}
	rec.take()

	race(func(string) { admin.ZRem(ctx, sk, a.Owner) })
	if _, err := d.Refresh(ctx, a, 10*time.Second); !errors.Is(err, driver.ErrNotHeld) {
		t.Errorf("Refresh of a permit removed meanwhile: err = %v, want ErrNotHeld", err)
	}
	rec.check(t, "refresh of a permit removed meanwhile", refresh, extend)
	gone("a permit removed meanwhile", a)

	race(func(string) {
		admin.ZAddXX(ctx, sk, redis.Z{Score: float64(time.Now().Add(-time.Second).UnixMilli()), Member: b.Owner})
	})
	if _, err := d.Refresh(ctx, b, 10*time.Second); !errors.Is(err, driver.ErrNotHeld) {
		t.Errorf("Refresh of a permit expired by the EXEC: err = %v, want ErrNotHeld", err)
	}
	rec.check(t, "refresh of a permit expired by the EXEC", refresh, extend, drop)
	gone("a permit expired by the EXEC", b)

	const foreign = "0123456789abcdef0123456789abcdef"
	race(func(lk string) { admin.Set(ctx, lk, foreign, 5*time.Second) })
	if _, err := d.Refresh(ctx, c, 30*time.Second); !errors.Is(err, driver.ErrNotHeld) {
		t.Errorf("Refresh of a permit whose lock key was taken meanwhile: err = %v, want ErrNotHeld", err)
	}
	// The set left empty, dropMembers looks, and leaves the other grant's
	// key alone.
	rec.check(t, "refresh of a permit whose lock key was taken meanwhile", refresh, extend, drop,
		"watch get time zrange lrange", "unwatch")
	gone("a permit whose lock key was taken meanwhile", c)
	if v := admin.Get(ctx, lk).Val(); v != foreign {
		t.Errorf("lock key holds %q, want the other grant's %q", v, foreign)
	}
	admin.Del(ctx, lk, sk)
}

// expireGTRefused is a go-redis hook that makes every PEXPIRE ... GT fail
// as a server before Redis 7.0 does: refused as it is queued (an unknown
// command: EXEC applies nothing), or, with atExec, when EXEC runs it (an
// unknown option: the transaction's other commands are applied).
type expireGTRefused struct{ atExec bool }

func (h expireGTRefused) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h expireGTRefused) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h expireGTRefused) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if args := c.Args(); len(args) == 4 && args[0] == "pexpire" && args[3] == "gt" {
				if h.atExec {
					args[3] = "zz"
				} else {
					args[0] = "pexpire-before-7.0"
				}
			}
		}
		return next(ctx, cmds)
	}
}

// On a server that refuses PEXPIRE's GT option (before Redis 7.0), a
// member's refresh falls back to the watched transaction, at once and for
// every later refresh, and leaves the lock key and the set expiring no
// sooner than the member.
func TestMemberRefreshWithoutExpireGT(t *testing.T) {
	for _, atExec := range []bool{false, true} {
		t.Run(fmt.Sprintf("atExec=%v", atExec), func(t *testing.T) {
			ctx := testCtx(t)
			rec := &recorder{}
			rdb := recorded(t, standalone(t), rec)
			addHook(rdb, expireGTRefused{atExec: atExec})
			d := testDriver(rdb, DefaultPrefix)
			t.Cleanup(func() { d.Close() })
			k := testKey(t)
			lk := d.LockKey(k)
			p := &driver.Lease{Key: k, Owner: owner(), Mode: driver.Permit, Limit: 2, TTL: time.Second}
			if err := d.Acquire(ctx, p); err != nil {
				t.Fatal(err)
			}
			rec.take()
			const watched = "watch get pttl time zrange zscore"
			for i := range 2 {
				if _, err := d.Refresh(ctx, p, 20*time.Second); err != nil {
					t.Fatalf("refresh %d: %v", i, err)
				}
				trips := rec.take()
				if i == 0 {
					if len(trips) != 4 || trips[0] != "get time zscore" {
						t.Errorf("first refresh: round trips %q, want the unwatched read and transaction, then the watched ones", trips)
					} else {
						trips = trips[2:]
					}
				}
				if want := []string{watched, "multi zadd pexpire pexpire exec"}; !slices.Equal(trips, want) {
					t.Errorf("refresh %d: round trips %q, want %q", i, trips, want)
				}
			}
			if !d.noExpireGT.Load() {
				t.Errorf("the driver did not record that GT is refused")
			}
			for _, name := range []string{lk, permitsKey(lk)} {
				if pttl := rdb.PTTL(ctx, name).Val(); pttl < 19*time.Second {
					t.Errorf("%s: PTTL %v after a refresh to 20s", name, pttl)
				}
			}
			if err := d.Release(ctx, p); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A release of a member that had expired at its read returns ErrNotHeld and
// removes the member all the same, whether other members are live (the
// unwatched transaction) or not (the watched one, which deletes the key);
// so does a release whose member was removed between its read and its
// EXEC (ZREM removes nothing).
func TestMemberReleaseNotHeld(t *testing.T) {
	d, _, rec := recordedDriver(t)
	ctx := testCtx(t)
	admin := standalone(t) // not recorded
	const release = "watch get time zrange zscore lrange"
	for _, mode := range []driver.Mode{driver.Permit, driver.Shared} {
		t.Run(mode.String(), func(t *testing.T) {
			k := testKey(t)
			lk := d.LockKey(k)
			set := memberKindOf(&driver.Lease{Mode: mode, Limit: 3}).set(lk)
			lease := func(ttl time.Duration) *driver.Lease {
				l := &driver.Lease{Key: k, Owner: owner(), Mode: mode, Limit: 3, TTL: ttl}
				if mode != driver.Permit {
					l.Limit = 0
				}
				if err := d.Acquire(ctx, l); err != nil {
					t.Fatal(err)
				}
				return l
			}
			others := "unwatch multi zremrangebyscore zrem zrange publish exec"
			if mode == driver.Shared {
				others = "unwatch multi zremrangebyscore zrem zrange exec" // only the last share wakes
			}
			expired, live := lease(50*time.Millisecond), lease(10*time.Second)
			time.Sleep(100 * time.Millisecond)
			rec.take()
			if err := d.Release(ctx, expired); !errors.Is(err, driver.ErrNotHeld) {
				t.Errorf("release of an expired member beside a live one: err = %v, want ErrNotHeld", err)
			}
			rec.check(t, "release of an expired member beside a live one", release, others)
			if n := admin.ZCard(ctx, set).Val(); n != 1 {
				t.Errorf("%d members left, want the live one", n)
			}

			gone := lease(10 * time.Second)
			vanish := func(op, lk string) {
				if op == "release" {
					admin.ZRem(context.Background(), set, gone.Owner)
				}
			}
			d.beforeExec.Store(&vanish)
			rec.take()
			err := d.Release(ctx, gone)
			d.beforeExec.Store(nil)
			if !errors.Is(err, driver.ErrNotHeld) {
				t.Errorf("release of a member removed before its EXEC: err = %v, want ErrNotHeld", err)
			}
			rec.check(t, "release of a member removed before its EXEC", release, others)

			if err := d.Release(ctx, live); err != nil {
				t.Fatal(err)
			}
			alone := lease(50 * time.Millisecond)
			// The marker outlives the member (as beside a longer member
			// released before): only the member expires.
			admin.PExpire(ctx, lk, 10*time.Second)
			admin.PExpire(ctx, set, 10*time.Second)
			time.Sleep(100 * time.Millisecond)
			rec.take()
			if err := d.Release(ctx, alone); !errors.Is(err, driver.ErrNotHeld) {
				t.Errorf("release of the last member, expired: err = %v, want ErrNotHeld", err)
			}
			rec.check(t, "release of the last member, expired", release, "multi zrem del publish exec")
			assertGone(t, admin, "after the last member's release", lk, set)
		})
	}
}
