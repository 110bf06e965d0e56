-- Append an episode to its conversation's open extraction chunk, idempotently.
--
-- KEYS[1] chunk list   KEYS[2] chunk meta   KEYS[3] episode node   KEYS[4] open-chunk zset
-- ARGV[1] episode id   ARGV[2] words   ARGV[3] now   ARGV[4] conversation
-- Returns {episodes in the chunk, words}; {-1, 0} when the episode was already extracted,
-- {-2, 0} when it is in the chunk already.
if redis.call('HEXISTS', KEYS[3], 'chunk') == 1 then return {-1, 0} end
if redis.call('LPOS', KEYS[1], ARGV[1]) then return {-2, 0} end
redis.call('RPUSH', KEYS[1], ARGV[1])
local words = redis.call('HINCRBY', KEYS[2], 'words', ARGV[2])
redis.call('HSET', KEYS[2], 'updated', ARGV[3])
redis.call('ZADD', KEYS[4], ARGV[3], ARGV[4])
return {redis.call('LLEN', KEYS[1]), words}
