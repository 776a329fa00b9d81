-- Extend the lock KEYS[1] to at least ARGV[2] ms if owner ARGV[1] holds it
-- (exclusive, or shared when ARGV[4] is "s": its member in the readers set
-- KEYS[3], not expired; or, when ARGV[4] is "o", as a hold of a named
-- owner's grant whose token, in the holds KEYS[1]:h, is ARGV[3]; or, when
-- ARGV[4] is "pN", as a permit of a semaphore of N permits: KEYS[1] holds
-- "SN" and its member in the permits set KEYS[1]:s is not expired; the
-- member is extended, and the lock key and the set to at least ARGV[2]
-- ms), and the fencing counter KEYS[2] has reached token
-- ARGV[3] (a grant with that token was made; the counter is missing only
-- when the server lost its data, and then the grant went with it, or after
-- a week without grants).
--
-- A Resume only ever extends: every expiry it touches (the lock key's PX, a
-- share's or a permit's score, their set's PX) is set to ARGV[2] ms from
-- now only where it ends sooner than that. The grant may be held by
-- another Lease too (the one whose handle this is), whose deadline counts
-- on the expiry as it was; and a Resume that lost its reply, applied after
-- its caller gave up, then leaves the grant no shorter than it was.
--
-- Returns 1 when held (and extended where it ended sooner), 2 when held
-- and the grant has a note (in KEYS[1] .. ":n", which is lengthened like
-- the grant: the resumed Lease's refreshes keep it then, prelude.lua), 0
-- when no such grant exists.
local c = redis.call('GET', KEYS[2])
if c and tonumber(c) < tonumber(ARGV[3]) then
  return 0
end
local px = tonumber(ARGV[2])
-- held returns the reply for a grant held, whose note is field's.
local function held(field)
  local n = KEYS[1] .. ':n'
  if redis.call('HEXISTS', n, field) == 0 then
    return 1
  end
  if redis.call('PTTL', n) < px then
    redis.call('PEXPIRE', n, px)
  end
  return 2
end
if ARGV[4] == 'o' then
  local cur = redis.call('GET', KEYS[1])
  local h = KEYS[1] .. ':h'
  if not cur or string.sub(cur, 1, 16) ~= string.sub(ARGV[1], 1, 16) or redis.call('HEXISTS', h, ARGV[1]) == 0
      or redis.call('HGET', h, 't') ~= ARGV[3] then
    return 0
  end
  if redis.call('PTTL', KEYS[1]) < px then
    redis.call('PEXPIRE', KEYS[1], px)
  end
  redis.call('PEXPIRE', h, redis.call('PTTL', KEYS[1]))
  return held(cur)
end
if string.sub(ARGV[4] or '', 1, 1) == 'p' then -- "pN"
  if redis.call('GET', KEYS[1]) ~= 'S' .. string.sub(ARGV[4], 2) then
    return 0
  end
  local s = KEYS[1] .. ':s'
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local score = redis.call('ZSCORE', s, ARGV[1])
  if not score or tonumber(score) < now then
    return 0
  end
  if tonumber(score) < now + px then
    redis.call('ZADD', s, string.format('%d', now + px), ARGV[1])
  end
  if redis.call('PTTL', KEYS[1]) < px then
    redis.call('PEXPIRE', KEYS[1], px)
  end
  if redis.call('PTTL', s) < px then
    redis.call('PEXPIRE', s, px)
  end
  return held(ARGV[1])
end
if ARGV[4] ~= 's' then
  if redis.call('GET', KEYS[1]) ~= ARGV[1] then
    return 0
  end
  if redis.call('PTTL', KEYS[1]) < px then
    redis.call('PEXPIRE', KEYS[1], px)
  end
  return held(ARGV[1])
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local score = redis.call('ZSCORE', KEYS[3], ARGV[1])
if not score or tonumber(score) < now or redis.call('GET', KEYS[1]) ~= 'R' then
  return 0
end
if tonumber(score) < now + px then
  redis.call('ZADD', KEYS[3], string.format('%d', now + px), ARGV[1])
end
if redis.call('PTTL', KEYS[1]) < px then
  redis.call('PEXPIRE', KEYS[1], px)
end
if redis.call('PTTL', KEYS[3]) < px then
  redis.call('PEXPIRE', KEYS[3], px)
end
return held(ARGV[1])
