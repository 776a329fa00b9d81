-- Extend each lock in KEYS to ARGV[1] ms if its owner still holds it.
--
-- KEYS[i] lock key; ARGV[1] TTL in ms; ARGV[i+1] owner token of KEYS[i]
-- (all keys in one Redis Cluster slot)
--
-- Returns one integer per key: 1 extended, 0 not held by that owner.
local held = {}
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[i + 1] then
    redis.call('PEXPIRE', KEYS[i], ARGV[1])
    held[i] = 1
  else
    held[i] = 0
  end
end
return held
