-- Delete the lock KEYS[1] if owner ARGV[1] holds it (exclusive), or end its
-- shared grant (ARGV[3] "s") or its permit (ARGV[3] "pN"), and hand the
-- key to the first live waiters of its queue when it is free (or the
-- freed permit to the permit waiters first in line), or announce the
-- release on the key's channel when none is queued and someone may listen
-- (a wake-up naming no one, "": see Wake in internal/redisx/notify.go).
--
-- KEYS[1] lock key, the only key sent; the script makes the others from
-- it where it needs them (scripts.go puts in the suffixes, internal/redisx's)
-- (KEYS[2] fencing counter, KEYS[3] queue, KEYS[4] queue entries, KEYS[5]
-- readers; KEYS[6], only when ARGV[4] is sent, the tombstone of the
-- attempt), all in its slot
-- ARGV[1] owner token, followed by "n" for a Lease with a note (deleted
-- from P{K}:n: prelude.lua; a named owner's is deleted with the grant's
-- last hold, always), ARGV[2] "1" when the grant
-- may have come through the queue (its entry holds the token), ARGV[3] "x"
-- exclusive, "s" shared, "o" a hold of a named owner (the grant is deleted
-- with its last hold), "pN" a permit (its set is KEYS[1] .. ":s"); ARGV[4]
-- (clean-up only) tombstone lifetime in ms
--
-- Returns 1 when the grant was deleted, 0 when the owner did not hold it.

local lk = KEYS[1]
local cur = redis.call('GET', lk)
-- The common case first: an exclusive grant of acquire.lua (no tombstone
-- to leave, no queue entry to delete) released with no one waiting: no
-- waiter queued here or in rediswatch's queue, and no listener mark
-- (internal/redisx's Core.Subscribe: a waiter that retries, or an
-- Observe, of either driver, subscribed to the key's channel). Nobody
-- hears the release, so it publishes nothing. It makes only the names it
-- uses. Otherwise the general path below publishes it.
if cur == ARGV[1] and ARGV[3] == 'x' and not ARGV[4] and ARGV[2] ~= '1' and redis.call('EXISTS', lk .. '{{queue}}', lk .. '{{watchqueue}}', lk .. '{{listen}}') == 0 then
  redis.call('DEL', lk)
  return 1
end
local channel = lk .. '{{channel}}'
--@fence
--@queue
local owner, noted = ARGV[1], #ARGV[1] == 33
if noted then
  owner = string.sub(owner, 1, 32)
end
local KEYS = {lk, lk .. '{{counter}}', lk .. '{{queue}}', lk .. '{{entries}}', lk .. '{{readers}}', ARGV[4] and lk .. '{{void}}' .. owner}

-- Clean-up after a lost reply: copies of the grant request that reach the
-- server after this point find the tombstone and change nothing.
if KEYS[6] then
  redis.call('SET', KEYS[6], '', 'PX', ARGV[4])
end
-- A grant handed over through the queue left its token in the entries.
if ARGV[2] == '1' then
  redis.call('HDEL', KEYS[4], owner)
end
if ARGV[3] == 'o' then
  if same_owner(cur, owner) then
    local h = KEYS[1] .. ':h'
    if redis.call('HDEL', h, owner) == 0 then
      return 0
    end
    if redis.call('HLEN', h) > 1 then
      return 1 -- holds are left ("t" is not one)
    end
    -- The last hold: the grant ends, whichever hold made it, and so
    -- does its note.
    redis.call('DEL', h)
    redis.call('HDEL', KEYS[1] .. ':n', cur)
    owner = cur
  end
  return release(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], channel, owner, cur)
end
if noted then
  redis.call('HDEL', KEYS[1] .. ':n', owner)
end
if ARGV[3] == 's' then
  return release_reader(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], channel, owner)
end
if string.sub(ARGV[3] or '', 1, 1) == 'p' then -- "pN"
  return release_permit(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], channel, owner)
end
return release(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], channel, owner, cur)
