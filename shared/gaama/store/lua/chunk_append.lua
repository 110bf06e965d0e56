-- Append an episode to its conversation's open extraction chunk, idempotently.
--
-- KEYS[1] chunk list   KEYS[2] chunk meta   KEYS[3] episode node   KEYS[4] open-chunk zset
-- ARGV[1] episode id   ARGV[2] words   ARGV[3] now   ARGV[4] conversation
-- ARGV[5] the chunk's word limit (0: none)
-- Returns {episodes in the chunk, words}; {-1, 0} when the episode was already extracted,
-- {-2, 0} when it is in the chunk already, {-3, words} when the chunk holds episodes and this
-- one would take it over the limit (nothing is appended: the caller closes the chunk first).
if redis.call('HEXISTS', KEYS[3], 'chunk') == 1 then return {-1, 0} end
if redis.call('LPOS', KEYS[1], ARGV[1]) then return {-2, 0} end
local limit = tonumber(ARGV[5] or '0')
if limit > 0 and redis.call('LLEN', KEYS[1]) > 0 then
  local open = tonumber(redis.call('HGET', KEYS[2], 'words') or '0')
  if open + tonumber(ARGV[2]) > limit then return {-3, open} end
end
redis.call('RPUSH', KEYS[1], ARGV[1])
local words = redis.call('HINCRBY', KEYS[2], 'words', ARGV[2])
redis.call('HSET', KEYS[2], 'updated', ARGV[3])
redis.call('ZADD', KEYS[4], ARGV[3], ARGV[4])
return {redis.call('LLEN', KEYS[1]), words}
