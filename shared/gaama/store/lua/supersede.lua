-- End a fact: a newer fact supersedes it. Of every fact that ends it, the one whose validity
-- begins first wins (ties: the smaller id), so the same endings in any order leave the same
-- fields. Then each of its source episodes whose facts have all ended gets the latest of their
-- ends as its own ``valid_to`` (an episode that says only what no longer holds).
--
-- KEYS[1] the old fact's node hash
-- ARGV node key prefix, adjacency key prefix, valid_to, superseded_by, reason, retired_at
-- Returns 1 when the fact's ending changed, 0 otherwise (also for a fact that is gone).
local key, nodep, adjp = KEYS[1], ARGV[1], ARGV[2]
local valid_to, by, reason, now = ARGV[3], ARGV[4], ARGV[5], ARGV[6]
if redis.call('EXISTS', key) == 0 then return 0 end
local cur = redis.call('HMGET', key, 'valid_to', 'superseded_by', 'sources')
local cur_to, cur_by = tonumber(cur[1]), cur[2]
local new_to = tonumber(valid_to)
if cur_to ~= nil and (cur_to < new_to or (cur_to == new_to and cur_by and cur_by <= by)) then
  return 0
end
redis.call('HSET', key, 'valid_to', valid_to, 'superseded_by', by, 'superseded_reason', reason)
if cur_to == nil then redis.call('HSET', key, 'retired_at', now) end
for ep in string.gmatch(cur[3] or '', '[^,]+') do
  local adj = redis.call('HGETALL', adjp .. ep)
  local latest, all_ended = nil, true
  for i = 1, #adj, 2 do
    local v = adj[i + 1]  -- a fact derived from this episode, in either layout
    if string.sub(v, 1, 1) == 'd' or string.find(v, 'DERIVED_FROM|i|', 1, true) == 1 then
      local t = tonumber(redis.call('HGET', nodep .. adj[i], 'valid_to'))
      if t == nil then all_ended = false break end
      if latest == nil or t > latest then latest = t end
    end
  end
  if all_ended and latest ~= nil and redis.call('EXISTS', nodep .. ep) == 1 then
    redis.call('HSET', nodep .. ep, 'valid_to', string.format('%.17g', latest))
  end
end
return 1
