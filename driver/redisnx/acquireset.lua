--@fence
-- Grant every lock key of KEYS, exclusive, to owner ARGV[i] for KEYS[i],
-- each for ARGV[#KEYS + 1] ms, all or none, each with a fencing token from
-- its counter. One attempt, as acquire.lua's exclusive case makes it: a
-- key is taken only if it is free (or already this owner's: a resent
-- request whose first run was applied), nobody is queued for it, and no
-- tombstone says that its owner's attempt was given up.
--
-- KEYS the lock keys, all in one slot on a Cluster (the driver checks);
-- each one's counter, tombstone and queue are made from it, as in
-- acquire.lua
-- ARGV[1..#KEYS] the owner tokens, ARGV[#KEYS + 1] the TTL in ms
--
-- Returns the tokens, one per key in order, when granted; -2 - PTTL of
-- the first key held by another owner (-1 for a key without expiry, or a
-- free key whose queue has waiters); 0 when the attempt was abandoned
-- (its clean-up ran first). Nothing is changed unless all are granted.
local n = #KEYS
for i = 1, n do
  local lk, owner = KEYS[i], ARGV[i]
  if redis.call('EXISTS', lk .. '{{void}}' .. owner) == 1 then
    return 0
  end
  local cur = redis.call('GET', lk)
  if cur and cur ~= owner then
    return -2 - redis.call('PTTL', lk)
  end
  if not cur and redis.call('EXISTS', lk .. '{{queue}}') == 1 then
    return -1
  end
end
local tokens = {}
for i = 1, n do
  redis.call('SET', KEYS[i], ARGV[i], 'PX', ARGV[n + 1])
  tokens[i] = next_token(KEYS[i] .. '{{counter}}')
end
return tokens
