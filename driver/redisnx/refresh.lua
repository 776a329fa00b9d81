-- Extend each lock in KEYS to at least ARGV[1] ms if its owner still holds
-- it, never shortening it.
--
-- KEYS[i] lock key; ARGV[1] TTL in ms; ARGV[i+1] owner token of KEYS[i],
-- or "s" and the owner token for a shared grant, whose readers set is
-- KEYS[i] .. ":r", or "o" and the owner token of a hold of a named owner,
-- whose holds are KEYS[i] .. ":h" (all keys in one Redis Cluster slot: they
-- share the lock key's hash tag); or "p" and the owner token of a permit,
-- whose permits set is KEYS[i] .. ":s": its member is extended, and the
-- lock key ("SN") and the set to at least ARGV[1] ms. A permit found gone
-- (expired, or its lock key deleted or taken behind its back) has its
-- member removed: it holds nothing. An ARGV[i+1] followed by "n" is a
-- Lease with a note: once extended, the notes hash KEYS[i] .. ":n" is
-- lengthened to ARGV[1] ms too (prelude.lua).
--
-- A refresh only ever extends: every expiry it touches (an exclusive lock
-- key's PX, a share's or a permit's score, their key's and set's PX, a
-- hold's grant) is set to ARGV[1] ms from now only where it ends sooner
-- than that. A grant may be held by two Leases (one resumed it elsewhere)
-- with different TTLs, and the renewal of the shorter one must not cut
-- short what the other's deadline counts on. On Redis 7.0 and later,
-- PEXPIRE's GT option does it in one command (lengthen); before, PTTL and a
-- comparison.
--
-- Returns one integer per key: 1 extended (or already long enough), 0 not
-- held by that owner.
local held = {}
local px = tonumber(ARGV[1])
local now
local gt = (redis.REDIS_VERSION_NUM or 0) >= 0x070000

-- lengthen sets key to expire px from now unless it lasts longer already.
local function lengthen(key)
  if gt then
    redis.call('PEXPIRE', key, px, 'GT')
  elseif redis.call('PTTL', key) < px then
    redis.call('PEXPIRE', key, px)
  end
end

-- clock sets now, the server's clock in ms, once per call.
local function clock()
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
end

-- extend sets member o of set, whose score is score, to expire px from now
-- at the earliest, and lk and set to expire in px at least (a share or a
-- permit).
local function extend(lk, set, o, score)
  if tonumber(score) < now + px then
    redis.call('ZADD', set, string.format('%d', now + px), o)
  end
  lengthen(lk)
  lengthen(set)
end

for i = 1, #KEYS do
  local owner = ARGV[i + 1]
  local noted = string.byte(owner, -1) == 110 -- "n"
  if noted then
    owner = string.sub(owner, 1, -2)
  end
  held[i] = 0
  if #owner == 33 and string.sub(owner, 1, 1) == 's' then
    -- A shared grant: its member in the readers set, not expired.
    clock()
    local r = KEYS[i] .. ':r'
    local score = redis.call('ZSCORE', r, string.sub(owner, 2))
    if score and tonumber(score) >= now and redis.call('GET', KEYS[i]) == 'R' then
      extend(KEYS[i], r, string.sub(owner, 2), score)
      held[i] = 1
    end
  elseif #owner == 33 and string.sub(owner, 1, 1) == 'p' then
    clock()
    local s, o = KEYS[i] .. ':s', string.sub(owner, 2)
    local score = redis.call('ZSCORE', s, o)
    if score then
      local cur = redis.call('GET', KEYS[i])
      if tonumber(score) >= now and cur and string.match(cur, '^S%d+$') then
        extend(KEYS[i], s, o, score)
        held[i] = 1
      else
        redis.call('ZREM', s, o)
      end
    end
  elseif #owner == 33 and string.sub(owner, 1, 1) == 'o' then
    local o = string.sub(owner, 2)
    local cur = redis.call('GET', KEYS[i])
    local h = KEYS[i] .. ':h'
    if cur and string.sub(cur, 1, 16) == string.sub(o, 1, 16) and redis.call('HEXISTS', h, o) == 1 then
      if redis.call('PTTL', KEYS[i]) < px then
        redis.call('PEXPIRE', KEYS[i], px)
      end
      redis.call('PEXPIRE', h, redis.call('PTTL', KEYS[i]))
      held[i] = 1
    end
  elseif redis.call('GET', KEYS[i]) == owner then
    lengthen(KEYS[i])
    held[i] = 1
  end
  if noted and held[i] == 1 then
    lengthen(KEYS[i] .. ':n')
  end
end
return held
