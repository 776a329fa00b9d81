--@fence
--@queue
-- Queue owner ARGV[1] for the lock KEYS[1], or renew its queue entry, and
-- grant it the key when its turn has come. A blocking Lock runs it when it
-- starts to wait, then at least once per heartbeat, and at once when a
-- message wakes it (the release that hands it the key names it on its
-- inbox).
--
-- KEYS[1] lock key, KEYS[2] fencing counter, KEYS[3] tombstone of this
-- attempt, KEYS[4] queue, KEYS[5] queue entries, KEYS[6] readers;
-- KEYS[7], when the waiter may be blocked on it, its grant list
-- ARGV[1] owner token, ARGV[2] TTL in ms, ARGV[3] the inbox channel of the
-- owner's Locker, ARGV[4] queue entry lifetime in ms, ARGV[5] "s" for a
-- shared grant, "pN" for a permit of a semaphore of N permits (its set is
-- KEYS[1] .. ":s"), "x" otherwise; ARGV[6] the wait's NONCE, which names
-- its grant list (P{K}:g:OWNER:NONCE), or "0" for none (see prelude.lua);
-- ARGV[7], sent only for a wait with one, the grant's note, stored in
-- P{K}:n as the waiter queues (see prelude.lua), so that a hand-over
-- grants it with its note
--
-- A run that ends the wait (a grant, {0, 0}, {3, M}) pushes "x" to
-- KEYS[7] when the list is empty, which unblocks the waiter's BLPOP (a
-- follow-up's, or the one pipelined behind this run: driver inline.go); a
-- list that holds something unblocks it already.
-- Returns {1, token} when the owner has the key: granted by this run, or
-- handed over by a release before it (the message on the inbox only wakes
-- the waiter, and grants nothing: this run finds the key its own, extends
-- it to the TTL, so that the grant's validity counts from this request,
-- and returns the token the release recorded in the entry); {2, PTTL} while it
-- waits (PTTL of the holder, or for a permit waiter facing permits the time
-- until the first of them expires; -1 when it has no expiry); {0, 0} when
-- this attempt was abandoned (its clean-up ran first); {3, M} for a permit
-- waiter when the key's permits, held or queued, are of a semaphore of M
-- permits, not N (the waiter is not queued by this run, nor granted).

local owner = ARGV[1]
-- (A user refused LLEN or RPUSH pushes nothing: redis.pcall, as push.)
local function unblock()
  if KEYS[7] and redis.pcall('LLEN', KEYS[7]) == 0 then
    push(KEYS[7], 'x')
  end
end
local shared = ARGV[5] == 's'
local limit = string.match(ARGV[5] or '', '^p(%d+)$') -- "pN"
limit = limit and tonumber(limit)
if redis.call('EXISTS', KEYS[3]) == 1 then
  unblock()
  return {0, 0}
end
local cur = current(KEYS[1], KEYS[6])
local mine = cur == owner
if shared and cur == 'R' then
  -- A live share of its own: handed over by a release (an expired one
  -- holds nothing, and the waiter queues again).
  local score = redis.call('ZSCORE', KEYS[6], owner)
  mine = score and tonumber(score) >= now_ms()
end
local s, held
if limit then
  s, held = KEYS[1] .. ':s', permits_of(cur)
  if held then
    -- A live permit of its own, as for a share.
    local score = redis.call('ZSCORE', s, owner)
    mine = score and tonumber(score) >= now_ms()
    if not mine and held ~= limit then
      unblock()
      return {3, held}
    end
  end
end
if mine then
  -- Handed over by a release, or granted by an earlier copy of this request.
  local e = redis.call('HGET', KEYS[5], owner)
  if shared then
    grant_reader(KEYS[1], KEYS[6], owner, ARGV[2], now_ms())
  elseif limit then
    grant_permit(KEYS[1], s, owner, limit, ARGV[2], now_ms())
  else
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
  unblock()
  if e and string.sub(e, 1, 1) == 'g' then
    return {1, tonumber(string.sub(e, 2))}
  end
  local token = next_token(KEYS[2])
  redis.call('HSET', KEYS[5], owner, 'g' .. string.format('%d', token))
  return {1, token}
end

local now = now_us()
if not redis.call('ZSCORE', KEYS[4], owner) then
  if limit then
    local queued = queued_limit(KEYS[4], KEYS[5], math.floor(now / 1000))
    if queued and queued ~= limit then
      unblock()
      return {3, queued}
    end
  end
  redis.call('ZADD', KEYS[4], string.format('%d', now), owner)
end
local mode = ''
if shared then
  mode = 's'
elseif limit then
  mode = 'p' .. limit .. '/'
end
if ARGV[7] then
  keep_note(KEYS[1], owner, ARGV[7], 2 * tonumber(ARGV[4]) + tonumber(ARGV[2]))
end
-- The entry ends any grant recorded for the owner ("gTOKEN"): a grant of
-- an earlier wait, which expired, is not this wait's.
redis.call('HSET', KEYS[5], owner,
  string.format('%d', math.floor(now / 1000) + tonumber(ARGV[4])) .. ' ' .. mode .. ARGV[2] .. ' ' .. (ARGV[6] or '0') .. ' ' .. ARGV[3])
keep_queue(KEYS[4], KEYS[5], ARGV[4])
if not cur or cur == 'R' or permits_of(cur) then
  local _, token = handover(KEYS[1], KEYS[2], KEYS[4], KEYS[5], KEYS[6], owner)
  if token then
    unblock()
    return {1, token}
  end
end
if held then
  return {2, first_expiry(s, now_ms())}
end
return {2, redis.call('PTTL', KEYS[1])}
