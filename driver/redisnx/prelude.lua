-- Functions shared by the scripts that grant (acquire, wait, release,
-- leave), in two parts: next_token, and, after the line "--@queue", the
-- queue's. scripts.go puts each part where a script has the line "--@fence"
-- or "--@queue": after the script's common case, when that needs no
-- function of the part (a function definition costs each run that gets
-- there, a tenth of an uncontended Lock+Unlock's server time in all).
--
-- The queue of a lock key P{K} (all names share the hash tag, so one script
-- may touch them all on a Cluster):
--
--   P{K}:q   sorted set: the waiting owners, scored by arrival (server
--            clock, microseconds)
--   P{K}:w   hash: owner -> "DEADLINE_MS TTL_MS NONCE INBOX" while it
--            waits (DEADLINE_MS on the server's clock: the entry is dead
--            after it unless the waiter renews it; INBOX the channel of the
--            waiter's Locker; a shared waiter's TTL_MS has an "s" before
--            it, a permit waiter's "p", the semaphore's limit and "/":
--            "p4/30000"; NONCE, decimal digits, names the wait's grant list
--            below, or is 0 for a waiter that has none and is woken on its
--            inbox: older versions wrote 0 or a run number there, which
--            their releases skip), or "gTOKEN" once the key was handed to
--            it: the token of that grant, which the waiter's wait.lua
--            returns, until it queues again
--
-- Both expire two entry lifetimes after the last waiter touched them.
--
--   P{K}:g:OWNER:NONCE   list: the grant list of one wait of OWNER (NONCE:
--            random, new for every wait, so that nothing pushed for an
--            earlier wait reaches a later one). The waiter blocks on it
--            (BLPOP, queue.go's follow-up of its wait step). handover
--            pushes "NONCE TOKEN" there when it hands the key to the
--            waiter, instead of a wake-up message: the reply to the BLPOP
--            is the grant, and the waiter needs no request more. The
--            waiter's own wait.lua or leave.lua pushes "x" there, which
--            only unblocks its BLPOP. Every push makes the list expire
--            LIST_LIFE_MS later. Only a client that may write the lock's
--            keys can push, and such a client can break every lock anyway
--            (docs/safety.md); a pub/sub-only client cannot. A user
--            without +rpush (the previous release's ACL rules) cannot
--            either: the hand-over then wakes the waiter on its inbox (see
--            push), and its waiters, refused LLEN or BLPOP, queue with
--            NONCE 0.
--
-- Every PUBLISH below is a wake-up message, whose format is described
-- once, at Wake in internal/redisx/notify.go (the Go side of both drivers
-- writes and parses it there): handover's names the new owner on its
-- inbox (a waiter without a grant list); "" on the key's channel P{K}:rel
-- names no one.
--
-- Shared (read) grants: the lock key holds "R" (never an owner: owners are
-- lowercase hex), so that every exclusive attempt, ours or a plain SET NX
-- lock's, finds it held, with a PX at least the longest reader's; and
--
--   P{K}:r   sorted set: the reader owners, scored by when each grant
--            expires (server clock, ms); expired members hold nothing and
--            are dropped by the next script that looks
--
-- The last reader to leave deletes both and hands the key on.
--
-- Grants of a named owner (mode "o"; lock.WithOwner): the lock key holds
-- the owner token of the grant's first hold; every token of the owner
-- starts with the same 16 hex digits, and
--
--   P{K}:h   hash: each hold's owner token -> "1", and "t" -> the grant's
--            fencing token; it expires with the lock key
--
-- A re-entry adds a hold; the grant ends with its last hold.
--
-- Notes (driver.Lease.Note, lock.WithNote):
--
--   P{K}:n   hash: owner -> the note of its grant (a named owner's grant:
--            the owner token of its first hold, the lock key's value); it
--            lives at least as long as every noted grant in it (keep_note,
--            and the refresh of a noted Lease lengthens it)
--
-- A grant made with a note writes it in the script that grants. A waiter
-- with a note writes it when it queues (wait.lua), kept two entry
-- lifetimes and its TTL from then: a hand-over grants only a live entry,
-- so the note outlives the grant's first TTL without the hand-over
-- touching it. A release or Leave of a Lease with a note deletes its field
-- (a named owner's grant: its last hold's release, always); a field of a
-- grant that expired is left to the hash's expiry. Inspect reports a
-- holder's field and ignores the others. Attempts without a note send
-- none, and their scripts make no call on P{K}:n.
--
-- Permits of a counting semaphore of N permits (mode "pN"): the lock key
-- holds "S" and N in decimal ("S4"; never an owner, nor "R"), with a PX at
-- least the longest permit's, so that every other attempt, and a plain SET
-- NX lock, finds it held; and
--
--   P{K}:s   sorted set: the permit owners, scored by when each permit
--            expires (server clock, ms); expired members hold nothing and
--            are dropped by the next script that looks
--
-- A permit is granted while the key is free or "SN" with fewer than N live
-- members, and no waiter is queued before it. Every permit waiter queued
-- and every permit held of a key has the same N: an attempt with another
-- limit M is refused, and changes nothing (acquire.lua returns "SN",
-- wait.lua {3, N}). A release hands the freed permit to the permit waiters
-- at the head of the queue, up to N; the last permit to go deletes both
-- keys and hands the key on. "SN" with no live member left is stale: free.

-- next_token returns the next fencing token of counter ctr: the counter plus
-- one, or the server's clock in microseconds when that is more (the counter
-- was missing: never used, lost with the server's data or evicted; or set
-- back: a failover to a replica that lagged). Tokens therefore keep
-- increasing as long as the server's clock moves forward. rediswatch follows
-- the same rule on the same counter.
--
-- Needs Redis 5 or later, which replicates a script's effects: TIME may
-- precede a write. On Redis 7 (which tells scripts its version) the
-- counter is read and set in one command, SET ... GET (Redis 6.2); older
-- servers take INCR and a SET.
--
-- The counter expires FENCE_LIFE_MS (7 days) after the last grant, so that
-- keys locked once do not leave a counter forever; a grant after that
-- seeds it from the clock again, above every token given before.
--
-- On the paths of every grant and wait step, numbers go to redis.call as
-- strings (string.format '%d', or constants written as strings): Redis
-- 7.0 turns a Lua number into an argument with "%.17g", about 0.4 µs an
-- argument, which was a tenth of an uncontended grant's server time.
local FENCE_LIFE_MS = '604800000'

local function next_token(ctr)
  local t = redis.call('TIME')
  local now = t[1] * 1000000 + t[2]
  if redis.REDIS_VERSION_NUM then
    local last = tonumber(redis.call('SET', ctr, string.format('%d', now), 'PX', FENCE_LIFE_MS, 'GET'))
    if last and last >= now then
      now = last + 1
      redis.call('SET', ctr, string.format('%d', now), 'PX', FENCE_LIFE_MS)
    end
    return now
  end
  local token = redis.call('INCR', ctr)
  if token < now then
    token = now
    redis.call('SET', ctr, string.format('%d', now), 'PX', FENCE_LIFE_MS)
  end
  return token
end

--@queue

-- same_owner reports whether the lock's value cur is a grant of the named
-- owner whose attempt is owner (the first 16 hex digits agree).
local function same_owner(cur, owner)
  return cur and cur ~= 'R' and string.sub(cur, 1, 16) == string.sub(owner, 1, 16)
end

-- keep_holds makes the holds h expire with the lock lk, after lk was
-- extended to at least px ms (never shortened: the other holds count on
-- it).
local function keep_holds(lk, h, px)
  if redis.call('PTTL', lk) < px then
    redis.call('PEXPIRE', lk, px)
  end
  redis.call('PEXPIRE', h, redis.call('PTTL', lk))
end

-- reenter adds hold owner to the grant of its named owner on lk (cur, its
-- value) and extends it to at least px ms; returns the grant's token, or
-- nil when lk is not such a grant.
local function reenter(lk, cur, owner, px)
  if not same_owner(cur, owner) then
    return nil
  end
  local h = lk .. ':h'
  local tok = redis.call('HGET', h, 't')
  if not tok then
    return nil
  end
  redis.call('HSET', h, owner, '1')
  keep_holds(lk, h, tonumber(px))
  return tonumber(tok)
end

-- LIST_LIFE_MS: how long a grant list lives after its last push, an entry
-- lifetime (internal/redisx's EntryLife): a waiter reads it sooner, or its
-- entry (which holds the grant too) is dead.
local LIST_LIFE_MS = '3000'

-- push pushes v to the grant list named list and reports whether it did.
-- A user without +rpush (the ACL rules of releases before grant lists) is
-- refused, and the script goes on (redis.pcall): a script is not rolled
-- back, so one that wrote already must not fail; the caller wakes the
-- waiter on its inbox instead.
local function push(list, v)
  if type(redis.pcall('RPUSH', list, v)) ~= 'number' then
    return false
  end
  redis.call('PEXPIRE', list, LIST_LIFE_MS)
  return true
end

-- push_list pushes v to the grant list of owner's wait nonce on lk, as
-- push does.
local function push_list(lk, owner, nonce, v)
  return push(lk .. ':g:' .. owner .. ':' .. nonce, v)
end

-- keep_note stores note as owner's in the notes hash of lk, which then
-- lives at least px ms (never shortened: other notes count on it).
local function keep_note(lk, owner, note, px)
  local n = lk .. ':n'
  redis.call('HSET', n, owner, note)
  if redis.call('PTTL', n) < tonumber(px) then
    redis.call('PEXPIRE', n, px)
  end
end

local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- keep_queue makes the queue keys q and w live life*2 ms from now, when a
-- waiter joins or renews its entry. Every Locker uses the same entry
-- lifetime, so this never shortens them.
local function keep_queue(q, w, life)
  local ttl = string.format('%d', 2 * tonumber(life))
  redis.call('PEXPIRE', q, ttl)
  redis.call('PEXPIRE', w, ttl)
end

local function now_ms()
  return math.floor(now_us() / 1000)
end

-- live drops the expired members of the readers or permits set z (now:
-- server clock in ms) and returns how many hold a grant.
local function live(z, now)
  redis.call('ZREMRANGEBYSCORE', z, '-inf', '(' .. string.format('%d', now))
  return redis.call('ZCARD', z)
end

-- permits_of returns N when the lock's value cur is "SN" (the key holds
-- permits of a semaphore of N), else nil.
local function permits_of(cur)
  if cur and string.byte(cur, 1) == 83 then -- "S"
    return tonumber(string.match(cur, '^S(%d+)$'))
  end
  return nil
end

-- current returns the value of lk, or nil when it is free; "R" with no
-- reader left holding a grant (the last ones expired) is deleted as free,
-- and so is "SN" with no permit left.
local function current(lk, r)
  local cur = redis.call('GET', lk)
  if cur == 'R' then
    if live(r, now_ms()) == 0 then
      redis.call('DEL', lk, r)
      return nil
    end
  elseif permits_of(cur) then
    local s = lk .. ':s'
    if live(s, now_ms()) == 0 then
      redis.call('DEL', lk, s)
      return nil
    end
  end
  return cur
end

-- grant_reader grants owner a shared lease on lk for px ms (lk free or
-- "R"): its member in r, and lk and r kept at least that long.
local function grant_reader(lk, r, owner, px, now)
  px = tonumber(px)
  redis.call('ZADD', r, string.format('%d', now + px), owner)
  if redis.call('PTTL', lk) < px then
    redis.call('SET', lk, 'R', 'PX', px)
  end
  if redis.call('PTTL', r) < px then
    redis.call('PEXPIRE', r, px)
  end
end

-- grant_permit grants owner a permit of the semaphore lk of limit n for px
-- ms (lk free, or "Sn" with fewer than n live permits): its member in s,
-- and lk ("Sn") and s kept at least that long. A free lk starts a new
-- semaphore: s is emptied first (members left there hold nothing: the
-- lock key was deleted behind their back).
local function grant_permit(lk, s, owner, n, px, now)
  px = tonumber(px)
  local pttl = redis.call('PTTL', lk)
  if pttl == -2 then
    redis.call('DEL', s)
  end
  redis.call('ZADD', s, string.format('%d', now + px), owner)
  if pttl < px then
    redis.call('SET', lk, 'S' .. n, 'PX', px)
  end
  if redis.call('PTTL', s) < px then
    redis.call('PEXPIRE', s, px)
  end
end

-- first_expiry returns the ms until the first of the live permits in s
-- expires (now: server clock in ms), at least 0.
local function first_expiry(s, now)
  local first = redis.call('ZRANGE', s, 0, 0, 'WITHSCORES')[2]
  if not first then
    return 0
  end
  return math.max(tonumber(first) - now, 0)
end

-- parse_entry splits a waiter's queue entry e: its deadline (a number),
-- its mode ("" exclusive, "s" shared, "p" a permit), the permit's limit (a
-- number; nil for other modes), TTL_MS, INBOX and NONCE (nil or "0": no
-- grant list). It returns nil when e is not a waiter's entry.
local function parse_entry(e)
  local deadline, ttl, nonce, inbox = string.match(e, '^(%d+) (%S+) (%d+) (.+)$')
  if not deadline then -- written by a version without the number
    deadline, ttl, inbox = string.match(e, '^(%d+) (%d+) (.+)$')
    if not deadline then
      return nil
    end
  end
  local mode, limit, px = '', nil, ttl
  local c = string.byte(ttl, 1)
  if c == 115 then -- "s"
    mode, px = 's', string.sub(ttl, 2)
  elseif c == 112 then -- "p"
    limit, px = string.match(ttl, '^p(%d+)/(%d+)$')
    if not limit then
      return nil
    end
    mode, limit = 'p', tonumber(limit)
  end
  return tonumber(deadline), mode, limit, px, inbox, nonce
end

-- queued_limit returns the limit of the first live permit waiter among the
-- first 64 of queue q (entries w; now: server clock in ms), or nil: every
-- permit waiter queued has the limit of the first.
local function queued_limit(q, w, now)
  for _, o in ipairs(redis.call('ZRANGE', q, 0, 63)) do
    local e = redis.call('HGET', w, o)
    if e then
      local deadline, mode, limit = parse_entry(e)
      if mode == 'p' and deadline >= now then
        return limit
      end
    end
  end
  return nil
end

-- handover grants the lock lk, free or shared (readers, "R"; permits,
-- "SN"), to the live waiters first in line in q that it can take: the
-- first one if it is exclusive and lk is free; else every shared waiter in
-- a row from the head while lk is free or "R"; else every permit waiter
-- in a row from the head while lk is free or "SN" of the waiter's limit
-- with fewer than N permits live. It drops dead entries on the way (at
-- most 64 in one call), records each grant in w as "gTOKEN", and tells
-- each new owner but self (the caller, told by the script's reply): it
-- pushes the grant to the owner's grant list, or, for a waiter without
-- one (or when the push is refused: see push), wakes it with a message naming it on its inbox (see Wake in
-- internal/redisx/notify.go). The message grants nothing (anyone who may
-- publish on the channel can send it): the waiter's next wait.lua finds
-- the key its own and takes the token from w.
-- Returns whether it granted anyone, and self's token if self was granted.
local function handover(lk, ctr, q, w, r, self)
  if redis.call('EXISTS', q) == 0 then
    return false
  end
  local now = now_ms()
  local any, mine = false, nil
  local s, held -- the permits set, and how many are live (once counted)
  for _ = 1, 64 do
    local head = redis.call('ZRANGE', q, 0, 0)[1]
    if not head then
      break
    end
    local e = redis.call('HGET', w, head)
    local deadline, mode, limit, px, inbox, nonce
    if e then
      deadline, mode, limit, px, inbox, nonce = parse_entry(e)
    end
    if deadline and deadline >= now then
      local cur = redis.call('GET', lk)
      if mode == 's' then
        if cur and cur ~= 'R' then
          break
        end
        redis.call('ZREM', q, head)
        grant_reader(lk, r, head, px, now)
      elseif mode == 'p' then
        s = s or lk .. ':s'
        if cur then
          if permits_of(cur) ~= limit then
            break
          end
          held = held or live(s, now)
          if held >= limit then
            break
          end
        else
          held = 0
        end
        redis.call('ZREM', q, head)
        grant_permit(lk, s, head, limit, px, now)
        held = held + 1
      else
        if any or cur then
          break
        end
        redis.call('ZREM', q, head)
        redis.call('SET', lk, head, 'PX', px)
      end
      local token = next_token(ctr)
      local tok = string.format('%d', token)
      -- The new owner's entry is live: it renewed it, and w's expiry with
      -- it, less than an entry lifetime ago, so w lives at least one more,
      -- longer than a heartbeat: the token outlives a lost message.
      redis.call('HSET', w, head, 'g' .. tok)
      if head == self then
        mine = token
      elseif not (nonce and nonce ~= '0' and push_list(lk, head, nonce, nonce .. ' ' .. tok)) then
        -- No grant list, or the push was refused: the wake-up (see the top).
        redis.call('PUBLISH', inbox, head)
      end
      any = true
      if mode == '' then
        break
      end
    else
      redis.call('ZREM', q, head)
      if e then
        redis.call('HDEL', w, head)
      end
    end
  end
  return any, mine
end

-- release deletes the lock lk if owner holds it (cur is lk's value, read
-- by the caller) and hands it to the first live waiters, or, when none is
-- queued, announces the release on channel ch. A key found free (expired)
-- is handed over too: the waiters need not wait for their next check.
-- Returns 1 when owner held the key, else 0.
local function release(lk, ctr, q, w, r, ch, owner, cur)
  if cur == owner then
    redis.call('DEL', lk)
    if not handover(lk, ctr, q, w, r, nil) then
      redis.call('PUBLISH', ch, '')
    end
    return 1
  end
  if not cur then
    handover(lk, ctr, q, w, r, nil)
  end
  return 0
end

-- release_reader ends owner's shared grant on lk, if it holds one (its
-- member in r, not expired), and when no reader is left deletes lk and r
-- and hands the key on as release does. Returns 1 when owner held a
-- shared grant, else 0.
local function release_reader(lk, ctr, q, w, r, ch, owner)
  local now = now_ms()
  local score = redis.call('ZSCORE', r, owner)
  redis.call('ZREM', r, owner)
  local held = 0
  if score and tonumber(score) >= now then
    held = 1
  end
  if redis.call('GET', lk) ~= 'R' then
    return held
  end
  if live(r, now) == 0 then
    redis.call('DEL', lk, r)
    if not handover(lk, ctr, q, w, r, nil) then
      redis.call('PUBLISH', ch, '')
    end
  end
  return held
end

-- release_permit ends owner's permit of the semaphore lk, if it holds one
-- (its member in lk:s, not expired, while lk holds "SN"), and hands the
-- freed permit to the permit waiters at the head of the queue, up to N.
-- When no permit is left it deletes lk and its set and hands the key on as
-- release does; while some are, lk and the set are kept as long as the
-- longest of them, no longer. Announces the release on ch when it handed
-- over nothing. Returns 1 when owner held a permit, else 0.
local function release_permit(lk, ctr, q, w, r, ch, owner)
  local s = lk .. ':s'
  local score = redis.call('ZSCORE', s, owner)
  if not score then
    return 0
  end
  redis.call('ZREM', s, owner)
  if not permits_of(redis.call('GET', lk)) then
    return 0 -- the lock key was deleted or taken behind its back
  end
  local now = now_ms()
  local held = 0
  if tonumber(score) >= now then
    held = 1
  end
  if live(s, now) == 0 then
    redis.call('DEL', lk, s)
  else
    local px = tonumber(redis.call('ZRANGE', s, -1, -1, 'WITHSCORES')[2]) - now + 1
    redis.call('PEXPIRE', lk, px)
    redis.call('PEXPIRE', s, px)
  end
  if not handover(lk, ctr, q, w, r, nil) then
    redis.call('PUBLISH', ch, '')
  end
  return held
end
