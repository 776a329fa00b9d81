-- Extend the lock KEYS[1] to ARGV[2] ms if owner ARGV[1] holds it, and the
-- fencing counter KEYS[2] has reached token ARGV[3] (a grant with that token
-- was made; the counter is missing only when the server lost its data, and
-- then the grant went with it, or after a week without grants).
--
-- Returns 1 when extended, 0 when no such grant exists.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local c = redis.call('GET', KEYS[2])
if c and tonumber(c) < tonumber(ARGV[3]) then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
