-- Delete the lock KEYS[1] if owner ARGV[1] holds it, and announce the
-- release on channel ARGV[2].
--
-- KEYS[1] lock key; KEYS[2] (clean-up only) tombstone of the attempt
-- ARGV[1] owner token, ARGV[2] release channel, ARGV[3] (clean-up only)
-- tombstone lifetime in ms
--
-- Returns 1 when the grant was deleted, 0 when the owner did not hold it.

-- Clean-up after a lost reply: copies of the grant request that reach the
-- server after this point find the tombstone and change nothing.
if KEYS[2] then
  redis.call('SET', KEYS[2], '', 'PX', ARGV[3])
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], '')
  return 1
end
return 0
