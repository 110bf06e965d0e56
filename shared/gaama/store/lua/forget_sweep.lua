-- One batch of a whole-tenant forget's sweep, atomic with the check that no turn was ingested
-- since the sweep began: an append in between changes the tenant's ingest counter, and the
-- sweep stops before deleting anything of it.
--
-- KEYS[1] the tenant's ingest counter   KEYS[2..] keys to unlink
-- ARGV[1] the counter's value when the tenant was found empty ('' for none)
-- ARGV[2] '1' to unlink the counter too (the last batch)
-- Returns the number of keys unlinked, or -1 when the counter moved (nothing unlinked).
local now = redis.call('GET', KEYS[1]) or ''
if now ~= ARGV[1] then return -1 end
local gone = 0
for i = 2, #KEYS do gone = gone + redis.call('UNLINK', KEYS[i]) end
if ARGV[2] == '1' then gone = gone + redis.call('UNLINK', KEYS[1]) end
return gone
