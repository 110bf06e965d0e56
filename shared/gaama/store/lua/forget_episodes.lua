-- Forget a batch of episodes and everything derived only from them, atomically.
--
-- KEYS[1]  the tenant's degree index (declared: routes the call to the tenant's shard; every
--          other key shares its hash slot)
-- KEYS[2]  (optional) the forget request's hash: the batch runs only while it is pending
-- ARGV[1]  node key prefix      ARGV[2]  adjacency key prefix
-- ARGV[3]  chain key prefix     ARGV[4]  reflected-marker key prefix
-- ARGV[5]  outbox entry prefix  ARGV[6]  the tenant's outbox index
-- ARGV[7..] episode ids
-- Returns {episodes, facts, reflections, concepts} removed, or false (nothing done) when the
-- request of KEYS[2] is not pending.
--
-- Per episode: its hash (the vector index document goes with it), its adjacency, every entry
-- pointing at it, its degree, its place in the chain, its chunk's "reflected" marker. The NEXT
-- chain is bridged over it (prev -> next), as if the turn had never been sent. A fact loses the
-- episode from its sources and is removed when none is left; a reflection citing a removed fact
-- is removed; a concept left with no edge is removed.
--
-- A fact that keeps some sources takes its scopes and time from them: its time is that of its
-- earliest remaining source episode (ties: the smaller id); its conversation (field and index
-- tag) stays when a remaining source is of that conversation, else it becomes the earliest
-- remaining source's; its subject, when a removed source had it and no remaining source has,
-- becomes the earliest remaining source's (a subject no source episode had names who the fact
-- is about and stays).
local deg = KEYS[1]
if KEYS[2] and redis.call('HGET', KEYS[2], 'status') ~= 'pending' then return false end
local nodep, adjp, chainp, reflp = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local outboxp, outbox_index = ARGV[5], ARGV[6]
local FIRST = 7
local call = redis.call
local doomed = {}
for i = FIRST, #ARGV do doomed[ARGV[i]] = true end
local removed = {0, 0, 0, 0}

local function refresh(n)
  if call('EXISTS', adjp .. n) == 1 then
    call('HSET', deg, n, call('HLEN', adjp .. n))
  else
    call('HDEL', deg, n)
  end
end

-- Delete node n with its adjacency and every entry pointing at it; return {neighbour = entry}.
local function unlink(n)
  local flat = call('HGETALL', adjp .. n)
  local nbs = {}
  for j = 1, #flat, 2 do
    local nb = flat[j]
    nbs[nb] = flat[j + 1]
    call('HDEL', adjp .. nb, n)
    refresh(nb)
  end
  call('DEL', nodep .. n, adjp .. n)
  call('HDEL', deg, n)
  return nbs
end

-- An adjacency value as kind, direction ('o' at the edge's source, 'i' at its target) and stored
-- weight ('' for 1): the kind's letter (gaama.store.codecs.EDGE_CODES) or, written before the
-- letters, 'KIND|o|w'.
local KINDS = {N = 'NEXT', D = 'DERIVED_FROM', F = 'DERIVED_FROM_FACT', H = 'HAS_CONCEPT',
               A = 'ABOUT_CONCEPT', S = 'SUPERSEDES'}
local function parse(entry)
  if string.find(entry, '|', 1, true) then
    local kind, dir, w = string.match(entry, '^([^|]+)|([io])|(.*)$')
    return kind, dir, (w == '1') and '' or w
  end
  local c = string.sub(entry, 1, 1)
  local up = string.upper(c)
  return KINDS[up], (c == up) and 'o' or 'i', string.sub(entry, 2)
end

local facts, concepts, reflections = {}, {}, {}
local gone_subjects = {}  -- subjects of the episodes removed here
for i = FIRST, #ARGV do
  local ep = ARGV[i]
  if call('EXISTS', nodep .. ep) == 1 then
    local f = call('HMGET', nodep .. ep, 'conversation', 'chunk', 'subject')
    if f[3] and f[3] ~= '' then gone_subjects[f[3]] = true end
    if f[2] then
      call('DEL', reflp .. f[2], outboxp .. f[2])  -- its chunk's markers: never sent again
      call('ZREM', outbox_index, f[2])
    end
    if f[1] then call('ZREM', chainp .. f[1], ep) end
    local prev, nxt, w
    for nb, entry in pairs(unlink(ep)) do
      local kind, dir, weight = parse(entry)
      if kind == 'NEXT' then
        if dir == 'i' then prev = nb else nxt = nb end
        w = weight
      elseif kind == 'DERIVED_FROM' then
        facts[nb] = true
      elseif kind == 'HAS_CONCEPT' then
        concepts[nb] = true
      end
    end
    if prev and nxt then
      call('HSET', adjp .. prev, nxt, 'N' .. w)
      call('HSET', adjp .. nxt, prev, 'n' .. w)
      refresh(prev)
      refresh(nxt)
    end
    removed[1] = removed[1] + 1
  end
end

for fact in pairs(facts) do
  if call('EXISTS', nodep .. fact) == 1 then
    local raw = call('HGET', nodep .. fact, 'sources') or ''
    local keep = {}
    for src in string.gmatch(raw, '[^,]+') do
      if not doomed[src] and call('EXISTS', nodep .. src) == 1 then keep[#keep + 1] = src end
    end
    if #keep == 0 then
      for nb, entry in pairs(unlink(fact)) do
        local kind = parse(entry)
        if kind == 'DERIVED_FROM_FACT' then
          reflections[nb] = true
        elseif kind == 'ABOUT_CONCEPT' then
          concepts[nb] = true
        end
      end
      removed[2] = removed[2] + 1
    else
      local set = {'sources', table.concat(keep, ',')}
      local first, first_t, first_id
      local convs, subjects = {}, {}
      for _, src in ipairs(keep) do
        local e = call('HMGET', nodep .. src, 'time', 'conversation', 'conversation_tag',
                       'subject', 'subject_tag')
        local t = tonumber(e[1])
        if t and (first == nil or t < first_t or (t == first_t and src < first_id)) then
          first, first_t, first_id = e, t, src
        end
        if e[2] then convs[e[2]] = true end
        if e[4] then subjects[e[4]] = true end
      end
      if first then
        local own = call('HMGET', nodep .. fact, 'conversation', 'subject')
        set[#set + 1] = 'time'
        set[#set + 1] = first[1]
        if not convs[own[1] or ''] then
          for _, kv in ipairs({{'conversation', first[2]}, {'conversation_tag', first[3]}}) do
            set[#set + 1] = kv[1]
            set[#set + 1] = kv[2] or ''
          end
        end
        local s = own[2] or ''
        if s ~= '' and gone_subjects[s] and not subjects[s] then
          for _, kv in ipairs({{'subject', first[4]}, {'subject_tag', first[5]}}) do
            set[#set + 1] = kv[1]
            set[#set + 1] = kv[2] or ''
          end
        end
      end
      call('HSET', nodep .. fact, unpack(set))
    end
  end
end

for r in pairs(reflections) do
  if call('EXISTS', nodep .. r) == 1 then
    unlink(r)
    removed[3] = removed[3] + 1
  end
end

for c in pairs(concepts) do
  if call('EXISTS', nodep .. c) == 1 and call('HLEN', adjp .. c) == 0 then
    call('DEL', nodep .. c, adjp .. c)
    call('HDEL', deg, c)
    removed[4] = removed[4] + 1
  end
end
return removed
