-- Write a conversation's NEXT chain again so that Redis stores it in the encoding its settings
-- give a sorted set of its size (a chain made under a lower zset-max-listpack-entries stays a
-- skiplist until rewritten). Members and scores are unchanged.
--
-- KEYS[1] the chain   ARGV[1] the most members to rewrite (the server's
-- zset-max-listpack-entries: a larger chain would stay a skiplist)
-- Returns 1 when the chain was rewritten, 0 when it is already a listpack, empty or too large.
local n = redis.call('ZCARD', KEYS[1])
if n == 0 or n > tonumber(ARGV[1]) then return 0 end
if redis.call('OBJECT', 'ENCODING', KEYS[1]) == 'listpack' then return 0 end
local flat = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
local args = {}
for i = 1, #flat, 2 do
  args[#args + 1] = flat[i + 1]
  args[#args + 1] = flat[i]
end
redis.call('DEL', KEYS[1])
for i = 1, #args, 1000 do
  redis.call('ZADD', KEYS[1], unpack(args, i, math.min(i + 999, #args)))
end
return 1
