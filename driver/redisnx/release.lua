-- Delete the lock KEYS[1] if owner ARGV[1] holds it (exclusive), or end its
-- shared grant (ARGV[4] "s") or its permit (ARGV[4] "pN"), and hand the
-- key to the first live waiters of its queue when it is free (or the
-- freed permit to the permit waiters first in line), or announce the
-- release on channel ARGV[2] when none is queued (a wake-up naming no one,
-- "": see Wake in internal/redisx/notify.go).
--
-- KEYS[1] lock key, KEYS[2] fencing counter, KEYS[3] queue, KEYS[4] queue
-- entries, KEYS[5] readers; KEYS[6] (clean-up only) tombstone of the
-- attempt
-- ARGV[1] owner token, ARGV[2] release channel, ARGV[3] "1" when the grant
-- may have come through the queue (its entry holds the token), ARGV[4] "x"
-- exclusive, "s" shared, "o" a hold of a named owner (the grant is deleted
-- with its last hold), "pN" a permit (its set is KEYS[1] .. ":s"); ARGV[5]
-- (clean-up only) tombstone lifetime in ms
--
-- Returns 1 when the grant was deleted, 0 when the owner did not hold it.

local cur = redis.call('GET', KEYS[1])
-- The common case first: an exclusive grant of acquire.lua (no tombstone
-- to leave, no queue entry to delete) released with no one queued.
if cur == ARGV[1] and ARGV[4] == 'x' and not KEYS[6] and ARGV[3] ~= '1' and redis.call('EXISTS', KEYS[3]) == 0 then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], '')
  return 1
end
--@fence
--@queue

-- Clean-up after a lost reply: copies of the grant request that reach the
-- server after this point find the tombstone and change nothing.
if KEYS[6] then
  redis.call('SET', KEYS[6], '', 'PX', ARGV[5])
end
-- A grant handed over through the queue left its token in the entries.
if ARGV[3] == '1' then
  redis.call('HDEL', KEYS[4], ARGV[1])
end
if ARGV[4] == 'o' then
  local owner = ARGV[1]
  if same_owner(cur, owner) then
    local h = KEYS[1] .. ':h'
    if redis.call('HDEL', h, owner) == 0 then
      return 0
    end
    if redis.call('HLEN', h) > 1 then
      return 1 -- holds are left ("t" is not one)
    end
    -- The last hold: the grant ends, whichever hold made it.
    redis.call('DEL', h)
    owner = cur
  end
  return release(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[2], owner, cur)
end
if ARGV[4] == 's' then
  return release_reader(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[2], ARGV[1])
end
if string.sub(ARGV[4] or '', 1, 1) == 'p' then -- "pN"
  return release_permit(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[2], ARGV[1])
end
return release(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[2], ARGV[1], cur)
