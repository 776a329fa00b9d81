-- Read who holds the lock KEYS[1] and who waits for it, changing nothing:
-- this script only reads (GET, PTTL, TIME, ZRANGE, HGET, HLEN), so that
-- lock.Inspect leaves the key as it found it, expired shares, permits and
-- dead queue entries included, which the granting scripts would drop.
--
-- KEYS[1] lock key, KEYS[2] fencing counter, KEYS[3] queue, KEYS[4] queue
-- entries, KEYS[5] readers, KEYS[6] permits, KEYS[7] holds, KEYS[8] notes
-- ARGV[1] the most waiters to read
--
-- Returns {TIME seconds, TIME microseconds, the lock's value or nil, its
-- PTTL, the counter or nil, readers {owner, score, ...}, permits {owner,
-- score, ...}, the holds' token "t" or nil, the holds' HLEN, queue
-- {owner, arrival, ...} (at most ARGV[1] + 1 of them, first in line
-- first), entries {entry or "" per queued owner}, notes {owner, note,
-- ...}}.

local t = redis.call('TIME')
local q = redis.call('ZRANGE', KEYS[3], 0, tonumber(ARGV[1]), 'WITHSCORES')
local entries = {}
for i = 1, #q, 2 do
  entries[#entries + 1] = redis.call('HGET', KEYS[4], q[i]) or ''
end
return {
  t[1], t[2],
  redis.call('GET', KEYS[1]),
  redis.call('PTTL', KEYS[1]),
  redis.call('GET', KEYS[2]),
  redis.call('ZRANGE', KEYS[5], 0, -1, 'WITHSCORES'),
  redis.call('ZRANGE', KEYS[6], 0, -1, 'WITHSCORES'),
  redis.call('HGET', KEYS[7], 't'),
  redis.call('HLEN', KEYS[7]),
  q,
  entries,
  redis.call('HGETALL', KEYS[8]),
}
