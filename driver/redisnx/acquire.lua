-- Grant the lock KEYS[1] to owner ARGV[1] for ARGV[2] ms, and return a
-- fencing token from the counter KEYS[2].
--
-- KEYS[1] lock key, KEYS[2] fencing counter, KEYS[3] tombstone of this attempt
-- ARGV[1] owner token, ARGV[2] TTL in ms
--
-- Returns the token (> 0) when granted; -2 - PTTL when another owner holds
-- the key (-1 for a key without expiry); 0 when this attempt was abandoned
-- (its clean-up ran first).
--
-- Needs Redis 5 or later, which replicates a script's effects: TIME may
-- precede a write.

if redis.call('EXISTS', KEYS[3]) == 1 then
  return 0
end
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if redis.call('GET', KEYS[1]) ~= ARGV[1] then
    return -2 - redis.call('PTTL', KEYS[1])
  end
  -- Our own grant: a resent request whose first run was applied.
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end

-- The token is the counter plus one, or the server's clock in microseconds
-- when that is more (the counter was missing: never used, lost with the
-- server's data or evicted; or set back: a failover to a replica that
-- lagged). Tokens therefore keep increasing as long as the server's clock
-- moves forward. rediswatch follows the same rule on the same counter.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local token = redis.call('INCR', KEYS[2])
if token < now then
  token = now
  redis.call('SET', KEYS[2], t[1] .. string.format('%06d', tonumber(t[2])))
end
return token
