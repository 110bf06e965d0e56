-- Provenance of nodes, in one call: the source episodes, with their external turn ids, of each
-- id. An episode is its own source; a fact's sources are its ``sources`` field (or, if it has
-- none, its outgoing DERIVED_FROM edges); a reflection's are the sources of its
-- DERIVED_FROM_FACT facts. Episodes without a turn id and repeats are left out.
--
-- KEYS[1] a node key of the tenant (routes the call)
-- ARGV[1] node prefix   ARGV[2] adj prefix   ARGV[3..] the ids
-- Reply: per id {episode, turn id, ...}.
local call, sub, find, gmatch = redis.call, string.sub, string.find, string.gmatch
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
-- The outgoing edges of one kind: its letter (gaama.store.codecs.EDGE_CODES) starts the value,
-- or, written before the letters, 'KIND|o|'.
local function targets(node, code, kind)
  local flat = call('HGETALL', adjp .. node)
  local legacy = kind .. '|o|'
  local n, out = #legacy, {}
  for j = 1, #flat, 2 do
    local val = flat[j + 1]
    if sub(val, 1, n) == legacy or (sub(val, 1, 1) == code and not find(val, '|', 1, true)) then
      out[#out + 1] = flat[j]
    end
  end
  return out
end
local function sources(fact, field)
  if not field or field == '' then return targets(fact, 'D', 'DERIVED_FROM') end
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
    for _, fact in ipairs(targets(id, 'F', 'DERIVED_FROM_FACT')) do
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
