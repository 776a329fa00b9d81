--@fence
-- Grant the lock KEYS[1] to owner ARGV[1] for ARGV[2] ms, exclusive or
-- shared (ARGV[3] "s"), and return a fencing token from the counter
-- KEYS[2]. One attempt, as TryLock makes: it never queues, and it is fair
-- to the queue: a free key with live waiters queued goes to the first of
-- them, and this attempt is refused; so is a shared attempt while a waiter
-- is queued behind the readers.
--
-- KEYS[1] lock key, KEYS[2] fencing counter, KEYS[3] tombstone of this
-- attempt, KEYS[4] queue, KEYS[5] queue entries, KEYS[6] readers
-- ARGV[1] owner token, ARGV[2] TTL in ms, ARGV[3] "x" exclusive, "s"
-- shared, "o" a hold of a named owner (a re-entry when its owner holds the
-- key)
--
-- Returns the token (> 0) when granted; -2 - PTTL when another owner holds
-- the key (-1 for a key without expiry); 0 when this attempt was abandoned
-- (its clean-up ran first).

-- The common case first: exclusive, no tombstone, no queue, one call for
-- both.
if ARGV[3] == 'x' and redis.call('EXISTS', KEYS[3], KEYS[4]) == 0 then
  if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
    return next_token(KEYS[2])
  end
elseif redis.call('EXISTS', KEYS[3]) == 1 then
  return 0
end
--@queue
local cur = current(KEYS[1], KEYS[6])
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
  grant_reader(KEYS[1], KEYS[6], ARGV[1], ARGV[2], math.floor(now_us() / 1000))
  return next_token(KEYS[2])
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
return token
