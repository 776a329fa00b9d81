--@fence
-- Grant the lock KEYS[1] to owner ARGV[1] for ARGV[2] ms, exclusive,
-- shared (ARGV[3] "s") or as a permit of a semaphore (ARGV[3] "pN"), and
-- return a fencing token from the counter KEYS[2]. One attempt, as TryLock
-- makes: it never queues, and it is fair to the queue: a free key with
-- live waiters queued goes to the first of them, and this attempt is
-- refused; so is a shared attempt or a permit while a waiter is queued
-- behind the readers or permits.
--
-- KEYS[1] lock key, the only key sent; the script makes the others from
-- it (scripts.go puts in the suffixes, internal/redisx's), the common case
-- only those it uses
-- (KEYS[2] fencing counter, KEYS[3] tombstone of this attempt, KEYS[4]
-- queue, KEYS[5] queue entries, KEYS[6] readers; the permits set is
-- KEYS[1] .. ":s"), all in its slot
-- ARGV[1] owner token, ARGV[2] TTL in ms, ARGV[3] "x" exclusive, "s"
-- shared, "o" a hold of a named owner (a re-entry when its owner holds the
-- key), "pN" a permit of a semaphore of N permits; ARGV[4], sent only for
-- an attempt with one, the grant's note (stored in P{K}:n: prelude.lua;
-- a re-entry keeps the first hold's)
--
-- Returns the token (> 0) when granted; -2 - PTTL when another owner holds
-- the key (-1 for a key without expiry; for a permit of a full semaphore,
-- the time until its first permit expires); 0 when this attempt was
-- abandoned (its clean-up ran first); for a permit, "SM" (a string) when
-- the key's permits, held or queued, are of a semaphore of M permits, not
-- N (nothing was changed).

-- The common case first: exclusive, no note, no tombstone, no queue, one
-- call for both. It makes only the names it uses (each costs the server
-- time of a string in Lua), and the table of all of them after it.
local lk = KEYS[1]
local void, queue = lk .. '{{void}}' .. ARGV[1], lk .. '{{queue}}'
if ARGV[3] == 'x' and not ARGV[4] and redis.call('EXISTS', void, queue) == 0 then
  if redis.call('SET', lk, ARGV[1], 'NX', 'PX', ARGV[2]) then
    return next_token(lk .. '{{counter}}')
  end
elseif redis.call('EXISTS', void) == 1 then
  return 0
end
local KEYS = {lk, lk .. '{{counter}}', void, queue, lk .. '{{entries}}', lk .. '{{readers}}'}
--@queue
-- granted stores the grant's note, if it has one, and returns token.
local function granted(token)
  if ARGV[4] then
    keep_note(KEYS[1], ARGV[1], ARGV[4], ARGV[2])
  end
  return token
end
local cur = current(KEYS[1], KEYS[6])
local limit = string.match(ARGV[3] or '', '^p(%d+)$') -- "pN"
limit = limit and tonumber(limit)
if limit then
  local s = KEYS[1] .. ':s'
  local held = permits_of(cur)
  if held and held ~= limit then
    return cur
  end
  local now = now_ms()
  if held then
    -- Our own permit: a resent request whose first run was applied.
    local score = redis.call('ZSCORE', s, ARGV[1])
    if score and tonumber(score) >= now then
      grant_permit(KEYS[1], s, ARGV[1], limit, ARGV[2], now)
      return granted(next_token(KEYS[2]))
    end
  end
  if redis.call('EXISTS', KEYS[4]) == 1 then
    local queued = queued_limit(KEYS[4], KEYS[5], now)
    if queued and queued ~= limit then
      return 'S' .. queued
    end
    if not cur or held then
      -- Waiters first, as for a share.
      handover(KEYS[1], KEYS[2], KEYS[4], KEYS[5], KEYS[6], nil)
      cur = redis.call('GET', KEYS[1])
      held = permits_of(cur)
      if (cur and held ~= limit) or redis.call('ZCARD', KEYS[4]) > 0 then
        return -2 - redis.call('PTTL', KEYS[1])
      end
    end
  end
  if cur and not held then
    return -2 - redis.call('PTTL', KEYS[1])
  end
  if held and live(s, now) >= limit then
    return -2 - first_expiry(s, now)
  end
  grant_permit(KEYS[1], s, ARGV[1], limit, ARGV[2], now)
  return granted(next_token(KEYS[2]))
end
if ARGV[3] == 's' then
  if cur and cur ~= 'R' then
    return -2 - redis.call('PTTL', KEYS[1])
  end
  if redis.call('EXISTS', KEYS[4]) == 1 then
    -- Waiters first: those that can be granted are; a waiter left (one
    -- that cannot be: a writer behind the readers) keeps this one out.
    handover(KEYS[1], KEYS[2], KEYS[4], KEYS[5], KEYS[6], nil)
    cur = redis.call('GET', KEYS[1])
    if (cur and cur ~= 'R') or redis.call('ZCARD', KEYS[4]) > 0 then
      return -2 - redis.call('PTTL', KEYS[1])
    end
  end
  grant_reader(KEYS[1], KEYS[6], ARGV[1], ARGV[2], now_ms())
  return granted(next_token(KEYS[2]))
end
if ARGV[3] == 'o' then
  local tok = reenter(KEYS[1], cur, ARGV[1], ARGV[2])
  if tok then
    return tok
  end
end
if not cur then
  if handover(KEYS[1], KEYS[2], KEYS[4], KEYS[5], KEYS[6], nil) then
    return -2 - redis.call('PTTL', KEYS[1])
  end
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
elseif cur ~= ARGV[1] then
  return -2 - redis.call('PTTL', KEYS[1])
else
  -- Our own grant: a resent request whose first run was applied.
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
local token = next_token(KEYS[2])
if ARGV[3] == 'o' then
  -- The first hold of a named owner's grant; holds of an earlier grant
  -- (lost, expired) are forgotten.
  local h = KEYS[1] .. ':h'
  redis.call('DEL', h)
  redis.call('HSET', h, 't', string.format('%d', token), ARGV[1], '1')
  redis.call('PEXPIRE', h, ARGV[2])
end
return granted(token)
