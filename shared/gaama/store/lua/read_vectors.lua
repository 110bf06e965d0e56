-- The read-ahead of a search (see GraphStore.read_vectors): stored fields and vector of the first
-- ARGV[4] nodes, in the order given, that have a vector of ARGV[3] dimensions — the int8 copy,
-- or the float32 vector for a node written before the copy existed.
--
-- KEYS[1] a node key of the tenant (routes the call)
-- ARGV[1] node prefix   ARGV[2] fields, comma-separated: the shown fields, the int8 field, the
-- float32 field   ARGV[3] dimensions   ARGV[4] how many   ARGV[5] the ids, comma-separated
-- Reply: {id, {shown values..., vector}} per node.
local nodep, dim, want = ARGV[1], tonumber(ARGV[3]), tonumber(ARGV[4])
local fields = {}
for f in string.gmatch(ARGV[2], '[^,]+') do fields[#fields + 1] = f end
local full = table.remove(fields)
local nf = #fields
local out, n = {}, 0
for v in string.gmatch(ARGV[5], '[^,]+') do
  if n >= want then break end
  local key = nodep .. v
  local row = redis.call('HMGET', key, unpack(fields))
  local vec = row[nf]
  if not (vec and #vec == dim) then
    vec = redis.call('HGET', key, full)
    if not (vec and #vec == dim * 4) then vec = false end
    row[nf] = vec
  end
  if vec then
    n = n + 1
    out[n] = {v, row}
  end
end
return out
