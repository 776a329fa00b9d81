-- Read who holds the lock KEYS[1] and who waits for it, changing nothing:
-- this script only reads (GET, PTTL, TIME, ZRANGE, HGET, HLEN, EXISTS), so that
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
-- ...}: the notes in KEYS[8] of the lock's value and of the readers and
-- permits (HGET each, only when KEYS[8] exists: the ACL rules in the
-- package doc have no HGETALL)}.

local t = redis.call('TIME')
local cur = redis.call('GET', KEYS[1])
local readers = redis.call('ZRANGE', KEYS[5], 0, -1, 'WITHSCORES')
local permits = redis.call('ZRANGE', KEYS[6], 0, -1, 'WITHSCORES')
local notes = {}
if redis.call('EXISTS', KEYS[8]) == 1 then
  local function note(o)
    local n = redis.call('HGET', KEYS[8], o)
    if n then
      notes[#notes + 1] = o
      notes[#notes + 1] = n
    end
  end
  if cur then
    note(cur)
  end
  for i = 1, #readers, 2 do
    note(readers[i])
  end
  for i = 1, #permits, 2 do
    note(permits[i])
  end
end
local q = redis.call('ZRANGE', KEYS[3], 0, tonumber(ARGV[1]), 'WITHSCORES')
local entries = {}
for i = 1, #q, 2 do
  entries[#entries + 1] = redis.call('HGET', KEYS[4], q[i]) or ''
end
return {
  t[1], t[2],
  cur,
  redis.call('PTTL', KEYS[1]),
  redis.call('GET', KEYS[2]),
  readers,
  permits,
  redis.call('HGET', KEYS[7], 't'),
  redis.call('HLEN', KEYS[7]),
  q,
  entries,
  notes,
}
