-- Append an episode to the end of its conversation's NEXT chain, atomically.
--
-- KEYS[1] node   KEYS[2] chain   KEYS[3] adjacency of the new node   KEYS[4] degree index
-- KEYS[5] the tenant's ingest counter
-- ARGV[1] id     ARGV[2] adjacency key prefix
-- ARGV[3], ARGV[4] the NEXT edge's adjacency values at the earlier and at the new episode
-- ARGV[5..] field/value pairs of the node
-- Returns 1 when the episode was appended, 0 when it already existed (a redelivery). ``seq`` is
-- the position in the chain (one past the last, so it stays increasing after a forget removed
-- turns); ``iseq`` the tenant-wide ingest order, which a forget request compares with its cut
-- (see gaama.store.forget).
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local id = ARGV[1]
local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
local pos = 0
if last[2] then pos = tonumber(last[2]) + 1 end
local fields = {}
for i = 5, #ARGV do fields[#fields + 1] = ARGV[i] end
fields[#fields + 1] = 'seq'
fields[#fields + 1] = tostring(pos)
fields[#fields + 1] = 'iseq'
fields[#fields + 1] = tostring(redis.call('INCR', KEYS[5]))
redis.call('HSET', KEYS[1], unpack(fields))
-- the tail of the chain is its highest-scored member: no separate tail key to keep in step
local prev = redis.call('ZRANGE', KEYS[2], -1, -1)[1]
if prev then
  redis.call('HSET', ARGV[2] .. prev, id, ARGV[3])
  redis.call('HSET', KEYS[3], prev, ARGV[4])
  redis.call('HSET', KEYS[4], prev, redis.call('HLEN', ARGV[2] .. prev))
end
redis.call('HSET', KEYS[4], id, redis.call('HLEN', KEYS[3]))
redis.call('ZADD', KEYS[2], pos, id)
return 1
