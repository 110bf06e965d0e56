-- Provenance of nodes, in one call: the source episodes, with their external turn ids, of each
-- id. An episode is its own source; a fact's sources are its ``sources`` field (or, if it has
-- none, its outgoing DERIVED_FROM edges); a reflection's are the sources of its
-- DERIVED_FROM_FACT facts. Episodes without a turn id and repeats are left out.
--
-- KEYS[1] a node key of the tenant (routes the call)
-- ARGV[1] node prefix   ARGV[2] adj prefix   ARGV[3..] the ids
-- Reply: per id {episode, turn id, ...}.
local call, sub, gmatch = redis.call, string.sub, string.gmatch
local nodep, adjp = ARGV[1], ARGV[2]
local turns = {}
local function turn(e)
  local t = turns[e]
  if t == nil then
    t = call('HGET', nodep .. e, 'turn_id') or false
    turns[e] = t
  end
  return t
end
local function targets(node, kind)
  local flat = call('HGETALL', adjp .. node)
  local want = kind .. '|o|'
  local n, out = #want, {}
  for j = 1, #flat, 2 do
    if sub(flat[j + 1], 1, n) == want then out[#out + 1] = flat[j] end
  end
  return out
end
local function sources(fact, field)
  if not field or field == '' then return targets(fact, 'DERIVED_FROM') end
  local out = {}
  for e in gmatch(field, '[^,]+') do out[#out + 1] = e end
  return out
end
local rows = {}
for i = 3, #ARGV do
  local id = ARGV[i]
  local f = call('HMGET', nodep .. id, 'kind', 'sources')
  local eps = {}
  if f[1] == 'episode' then
    eps = {id}
  elseif f[1] == 'fact' then
    eps = sources(id, f[2])
  elseif f[1] == 'reflection' then
    for _, fact in ipairs(targets(id, 'DERIVED_FROM_FACT')) do
      for _, e in ipairs(sources(fact, call('HGET', nodep .. fact, 'sources'))) do
        eps[#eps + 1] = e
      end
    end
  end
  local prov, seen = {}, {}
  for _, e in ipairs(eps) do
    if not seen[e] then
      seen[e] = true
      local t = turn(e)
      if t then
        prov[#prov + 1] = e
        prov[#prov + 1] = t
      end
    end
  end
  rows[i - 2] = prov
end
return rows
