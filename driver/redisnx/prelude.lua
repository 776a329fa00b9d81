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
--   P{K}:w   hash: owner -> "DEADLINE_MS TTL_MS N INBOX" while it waits
--            (DEADLINE_MS on the server's clock: the entry is dead after it
--            unless the waiter renews it; N numbers the waiter's wait.lua
--            runs; INBOX the channel of the waiter's Locker), or "gTOKEN"
--            once the key was handed to it
--
-- Both expire two entry lifetimes after the last waiter touched them.

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
local FENCE_LIFE_MS = 604800000

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

local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- keep_queue makes the queue keys q and w live life*2 ms from now, when a
-- waiter joins or renews its entry. Every Locker uses the same entry
-- lifetime, so this never shortens them.
local function keep_queue(q, w, life)
  local ttl = 2 * tonumber(life)
  redis.call('PEXPIRE', q, ttl)
  redis.call('PEXPIRE', w, ttl)
end

-- handover grants the free lock lk to the first live waiter queued in q,
-- dropping dead entries on the way (at most 64 in one call), records the
-- grant in w as "gTOKEN", and tells the new owner on its inbox with
-- "OWNER TOKEN N" (N from the entry: the waiter takes the message as the
-- grant only if N is its last wait.lua's), unless the new owner is self
-- (the caller, told by the script's reply). Returns the owner and token,
-- or nil when no live waiter is queued.
local function handover(lk, ctr, q, w, self)
  if redis.call('EXISTS', q) == 0 then
    return nil
  end
  local now = math.floor(now_us() / 1000)
  for _ = 1, 64 do
    local head = redis.call('ZRANGE', q, 0, 0)[1]
    if not head then
      return nil
    end
    redis.call('ZREM', q, head)
    local e = redis.call('HGET', w, head)
    local deadline, px, n, inbox
    if e then
      deadline, px, n, inbox = string.match(e, '^(%d+) (%d+) (%d+) (.+)$')
      if not deadline then -- written by a version without N
        deadline, px, inbox = string.match(e, '^(%d+) (%d+) (.+)$')
      end
    end
    if deadline and tonumber(deadline) >= now then
      redis.call('SET', lk, head, 'PX', px)
      local token = next_token(ctr)
      local tok = string.format('%d', token)
      -- The new owner's entry is live: it renewed it, and w's expiry with
      -- it, less than an entry lifetime ago, so w lives at least one more,
      -- longer than a heartbeat: the token outlives a lost message.
      redis.call('HSET', w, head, 'g' .. tok)
      if head ~= self then
        redis.call('PUBLISH', inbox, head .. ' ' .. tok .. ' ' .. (n or ''))
      end
      return head, token
    end
    if e then
      redis.call('HDEL', w, head)
    end
  end
  return nil
end

-- release deletes the lock lk if owner holds it (cur is lk's value, read
-- by the caller) and hands it to the first live waiter, or, when none is
-- queued, announces the release on channel ch. A key found free (expired)
-- is handed over too: the waiters need not wait for their next check.
-- Returns 1 when owner held the key, else 0.
local function release(lk, ctr, q, w, ch, owner, cur)
  if cur == owner then
    redis.call('DEL', lk)
    if not handover(lk, ctr, q, w, nil) then
      redis.call('PUBLISH', ch, '')
    end
    return 1
  end
  if not cur then
    handover(lk, ctr, q, w, nil)
  end
  return 0
end
