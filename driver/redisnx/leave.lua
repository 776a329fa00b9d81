--@fence
--@queue
-- Take owner ARGV[1] out of the queue of the lock KEYS[1], when its Lock
-- call ends without the key (cancelled, timed out, failed). If the key (a
-- share, a permit) was handed to it meanwhile, give it to the next waiter,
-- or free it.
--
-- KEYS[1] lock key, KEYS[2] fencing counter, KEYS[3] tombstone of this
-- attempt, KEYS[4] queue, KEYS[5] queue entries, KEYS[6] readers;
-- KEYS[7], when the waiter may be blocked on it, or its wait stepped
-- inline, its grant list (see prelude.lua)
-- ARGV[1] owner token, ARGV[2] release channel, ARGV[3] tombstone lifetime
-- in ms (0: none; the driver leaves one on every Leave, since a request of
-- the waiter's may still be on its way, so that the copy changes nothing);
-- ARGV[4] "x" to push "x" to KEYS[7], which unblocks a follow-up's BLPOP,
-- "d" to delete KEYS[7] (an inline step's BLPOP ended with its connection);
-- ARGV[5] "n", sent only for a wait with a note, deletes the owner's note
-- (P{K}:n: prelude.lua)
--
-- A grant handed to the owner meanwhile (pushed to its grant list or not)
-- is passed on here: the server's state, not the list, says who holds.
-- Returns 1 when the key was the owner's and was passed on, else 0.

if tonumber(ARGV[3]) > 0 then
  redis.call('SET', KEYS[3], '', 'PX', ARGV[3])
end
if KEYS[7] and ARGV[4] == 'd' then
  redis.call('DEL', KEYS[7])
elseif KEYS[7] then
  push(KEYS[7], 'x') -- refused (no +rpush) after the SET: pushes nothing
end
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('HDEL', KEYS[5], ARGV[1])
if ARGV[5] then
  redis.call('HDEL', KEYS[1] .. ':n', ARGV[1])
end
if redis.call('ZSCORE', KEYS[6], ARGV[1]) then
  return release_reader(KEYS[1], KEYS[2], KEYS[4], KEYS[5], KEYS[6], ARGV[2], ARGV[1])
end
if redis.call('ZSCORE', KEYS[1] .. ':s', ARGV[1]) then
  return release_permit(KEYS[1], KEYS[2], KEYS[4], KEYS[5], KEYS[6], ARGV[2], ARGV[1])
end
local cur = current(KEYS[1], KEYS[6])
if permits_of(cur) or cur == 'R' then
  -- The waiter may have kept waiters behind it from a free permit, or
  -- shared ones from the readers' key.
  handover(KEYS[1], KEYS[2], KEYS[4], KEYS[5], KEYS[6], nil)
  return 0
end
return release(KEYS[1], KEYS[2], KEYS[4], KEYS[5], KEYS[6], ARGV[2], ARGV[1], cur)
