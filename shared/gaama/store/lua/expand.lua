-- The whole 2-hop expansion of a search in one call (see GraphStore.expand): breadth-first from
-- the seeds, edges followed both ways; hubs are not expanded through; a node's neighbours are
-- admitted heaviest walk weight first (ties by id); nodes outside the scope are dropped (concepts
-- are bridges and always kept); at most ARGV[5] nodes, and once that many are in, no further
-- adjacency is read. Degrees come from the degree index (HLEN for a node it lacks).
--
-- The walk weight and the hub rule are defined in Python (gaama.model.walk_weight, is_hub) and
-- arrive here as arguments: the type weights, the power of the stored weight, the hub degree.
--
-- KEYS[1] an adjacency key of the tenant (routes the call)   KEYS[2] the tenant's degree index
-- ARGV[1] adj prefix   ARGV[2] node prefix   ARGV[3] hops
-- ARGV[4] hub degree: a node whose degree is above it is a hub
-- ARGV[5] max nodes   ARGV[6] conversation ('' = any)   ARGV[7] subject ('' = any)
-- ARGV[8] concept id prefix   ARGV[9] type weights "KIND=w;..."
-- ARGV[10] power of the stored weight in the walk weight   ARGV[11] fixed-point units
-- ARGV[12] read-ahead: how many nodes (0 = none)   ARGV[13] their fields, comma-separated: the
-- shown fields, then the vector field   ARGV[14] bytes of a vector   ARGV[15] returned kinds' id
-- prefixes, comma-separated   ARGV[16] the candidates already held, comma-separated
-- ARGV[17..] the seeds
-- Reply: {node ids, full degrees, edges, read-ahead}, packed to parse without an object per value:
-- the ids comma-separated (node ids never hold a comma); the degrees as little-endian int32; each
-- edge once as three little-endian float64: indexes into the ids and its walk weight in
-- fixed-point units (integers, so the weight crosses exactly); the read-ahead as below. Keys are
-- built from the prefixes: every key of a tenant shares its hash slot.
local find, sub, call, num = string.find, string.sub, redis.call, tonumber
local adjp, nodep = ARGV[1], ARGV[2]
local hops, hub, cap = num(ARGV[3]), num(ARGV[4]), num(ARGV[5])
local conv, subj, concept = ARGV[6], ARGV[7], ARGV[8]
local tw = {}
for kind, w in string.gmatch(ARGV[9], '([^=;]+)=([^;]+)') do tw[kind] = num(w) end
local power, units = num(ARGV[10]), num(ARGV[11])
local degk = KEYS[2]
local degree = {}
-- Full store degree of each id not known yet: the degree index in one HMGET per 500 ids, HLEN
-- for a node it does not hold (data written before the index existed).
local function load_degrees(ids)
  local todo = {}
  for _, v in ipairs(ids) do
    if degree[v] == nil then todo[#todo + 1] = v end
  end
  for i = 1, #todo, 500 do
    local part = {unpack(todo, i, math.min(i + 499, #todo))}
    local got = call('HMGET', degk, unpack(part))
    for j, v in ipairs(part) do
      degree[v] = num(got[j]) or call('HLEN', adjp .. v)
    end
  end
end
-- the kinds' letters in adjacency values (gaama.store.codecs.EDGE_CODES), either case
local KINDS = {N = 'NEXT', D = 'DERIVED_FROM', F = 'DERIVED_FROM_FACT', H = 'HAS_CONCEPT',
               A = 'ABOUT_CONCEPT', S = 'SUPERSEDES'}
-- walk weight by stored value: the kind's letter and the weight if not 1, or, written before
-- the letters, 'KIND|o|w' (values repeat: parse each once)
local weights = {}
local function walk(val)
  local ww = weights[val]
  if ww == nil then
    local bar = find(val, '|', 1, true)
    if bar then
      local w = num(sub(val, bar + 3)) or 0
      ww = (tw[sub(val, 1, bar - 1)] or 0) * w ^ power
    else
      local kind = KINDS[string.upper(sub(val, 1, 1))]
      local w = (#val == 1) and 1 or (num(sub(val, 2)) or 0)
      ww = kind and (tw[kind] or 0) * w ^ power or 0  -- not a value of ours: no walk weight
    end
    weights[val] = ww
  end
  return ww
end
local scoped = conv ~= '' or subj ~= ''
local verdict = {}
local function in_scope(v)
  if not scoped or sub(v, 1, #concept) == concept then return true end
  local ok = verdict[v]
  if ok == nil then
    local f = call('HMGET', nodep .. v, 'conversation', 'subject')
    ok = (conv == '' or f[1] == conv) and (subj == '' or f[2] == subj)
    verdict[v] = ok
  end
  return ok
end
local nw = {}  -- walk weight of each neighbour of the node being read
local function heavier(a, b)
  local x, y = nw[a], nw[b]
  if x ~= y then return x > y end
  return a < b
end
local nodes, index = {}, {}
local count = 0
for i = 17, #ARGV do
  local s = ARGV[i]
  if not index[s] then count = count + 1; nodes[count] = s; index[s] = count end
end
local nseeds = count
local frontier = {}
for i = 1, count do frontier[i] = nodes[i] end
-- the adjacency of every node read, in reading order (edges are indexed only once the subgraph
-- is complete, and weights parsed only for edges that are kept)
local readers, flats, nread = {}, {}, 0
for hop = 1, hops do
  if #frontier == 0 or count >= cap then break end
  local ring = {}
  load_degrees(frontier)
  for _, u in ipairs(frontier) do
    if count >= cap then break end  -- full: no more reads (see GraphStore.expand)
    if degree[u] <= hub then  -- not a hub (gaama.model.is_hub)
      local flat = call('HGETALL', adjp .. u)
      nread = nread + 1; readers[nread] = u; flats[nread] = flat
      local nbs, nn = {}, 0
      for j = 1, #flat, 2 do
        local v = flat[j]
        if not index[v] then nn = nn + 1; nbs[nn] = v; nw[v] = walk(flat[j + 1]) end
      end
      if nn > 1 then table.sort(nbs, heavier) end
      for i = 1, nn do
        if count >= cap then break end
        local v = nbs[i]
        if not index[v] and in_scope(v) then
          count = count + 1; nodes[count] = v; index[v] = count; ring[#ring + 1] = v
        end
      end
    end
  end
  frontier = ring
end
load_degrees(nodes)
-- values of table t (1..n) as one little-endian string of fmt each, in chunks that fit Lua's stack
local function packed(fmt, t, n)
  local parts = {}
  for i = 1, n, 4000 do
    local j = math.min(i + 3999, n)
    parts[#parts + 1] = struct.pack('<' .. string.rep(fmt, j - i + 1), unpack(t, i, j))
  end
  return table.concat(parts)
end
local degrees, out = {}, {}
for i = 1, count do degrees[i] = degree[nodes[i]] end
local read = {}
for r = 1, nread do read[readers[r]] = true end
local no = 0
for r = 1, nread do
  local flat, iu = flats[r], index[readers[r]]
  for j = 1, #flat, 2 do
    local v = flat[j]
    local iv = index[v]
    -- an edge read from both ends is kept once, from its lower-indexed end
    if iv and (iu < iv or not read[v]) then
      out[no + 1] = iu - 1
      out[no + 2] = iv - 1
      out[no + 3] = math.floor(walk(flat[j + 1]) * units + 0.5)
      no = no + 3
    end
  end
end
-- The read-ahead: stored fields and vector of the first ARGV[12] admitted nodes past the seeds
-- that are of a returned kind, not among the candidates held, and have a vector of ARGV[14]
-- bytes; one flat array, per node its id, its shown values (false for an absent field), its
-- vector.
local want, ahead, na = num(ARGV[12]), {}, 0
if want > 0 then
  local fields, returned, held = {}, {}, {}
  for f in string.gmatch(ARGV[13], '[^,]+') do fields[#fields + 1] = f end
  for p in string.gmatch(ARGV[15], '[^,]+') do returned[p] = true end
  for v in string.gmatch(ARGV[16], '[^,]+') do held[v] = true end
  local nf, size, got = #fields, num(ARGV[14]), 0
  for i = nseeds + 1, count do
    if got >= want then break end
    local v = nodes[i]
    local bar = find(v, '_', 1, true)
    if not held[v] and bar and returned[sub(v, 1, bar - 1)] then
      local row = call('HMGET', nodep .. v, unpack(fields))
      local vec = row[nf]
      if vec and #vec == size then
        got = got + 1
        ahead[na + 1] = v
        for k = 1, nf do ahead[na + 1 + k] = row[k] end
        na = na + 1 + nf
      end
    end
  end
end
return {table.concat(nodes, ',', 1, count), packed('i4', degrees, count), packed('d', out, no), ahead}
