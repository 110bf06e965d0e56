-- Up to a given number of one node's neighbours along edges of one kind and direction, per key,
-- read with HSCAN so that a hub's cost is bounded by what is asked for, not by its degree
-- (HGETALL of a concept with thousands of edges costs the whole hash on every call). A small
-- hash (listpack) comes back whole in insertion order, as HGETALL gives it. All keys share the
-- tenant's hash slot.
--
-- KEYS      adjacency hashes
-- ARGV[1]   the letter that starts the values to keep (gaama.store.codecs.adjacency_code), e.g.
--           "a" for incoming ABOUT_CONCEPT edges
-- ARGV[2]   most neighbours returned per key
-- ARGV[3]   most entries examined per key (bounds the time on a hub of other edge kinds)
-- ARGV[4]   the same edges' prefix in values written before the letters, e.g. "ABOUT_CONCEPT|i|"
-- Returns, per key, the neighbour ids kept, in scan order.
local code, limit, cap, legacy = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local sub, find = string.sub, string.find
local function wanted(val)
  if find(val, '|', 1, true) then return sub(val, 1, #legacy) == legacy end
  return sub(val, 1, 1) == code
end
local out = {}
for k = 1, #KEYS do
  local found, seen, cursor = {}, 0, "0"
  repeat
    local reply = redis.call("HSCAN", KEYS[k], cursor, "COUNT", 128)
    cursor = reply[1]
    local kv = reply[2]
    for i = 1, #kv, 2 do
      seen = seen + 1
      if #found < limit and wanted(kv[i + 1]) then
        found[#found + 1] = kv[i]
      end
    end
  until cursor == "0" or #found >= limit or seen >= cap
  out[k] = found
end
return out
