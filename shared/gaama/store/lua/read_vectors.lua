-- The read-ahead of a search (see GraphStore.read_vectors): stored fields and vector of the first
-- ARGV[4] nodes, in the order given, that have a vector of ARGV[3] bytes.
--
-- KEYS[1] a node key of the tenant (routes the call)
-- ARGV[1] node prefix   ARGV[2] fields, comma-separated: the shown fields, then the vector field
-- ARGV[3] bytes of a vector   ARGV[4] how many   ARGV[5] the ids, comma-separated
-- Reply: one flat array, per node its id, its shown values (false for an absent field), its
-- vector: a flat reply is parsed without building a list per node.
local nodep, size, want = ARGV[1], tonumber(ARGV[3]), tonumber(ARGV[4])
local fields = {}
for f in string.gmatch(ARGV[2], '[^,]+') do fields[#fields + 1] = f end
local nf = #fields
local out, n, at = {}, 0, 0
for v in string.gmatch(ARGV[5], '[^,]+') do
  if n >= want then break end
  local row = redis.call('HMGET', nodep .. v, unpack(fields))
  local vec = row[nf]
  if vec and #vec == size then
    n = n + 1
    out[at + 1] = v
    for i = 1, nf do out[at + 1 + i] = row[i] end
    at = at + 1 + nf
  end
end
return out
