-- The cut of a forget request on one lane: the tenant's ingest counter when the request passed.
-- The first cut of a lane wins (a redelivered forget must not move it past turns sent after the
-- request). Only an accepted request gets a cut: an unknown or abandoned one is left as it is
-- (never re-created), and the caller drops the event.
--
-- KEYS[1] request hash   KEYS[2] the tenant's ingest counter   ARGV[1] lane
-- Returns {1, cut} or {0, reason}: 'unknown' (no such request) or the request's status.
local status = redis.call('HGET', KEYS[1], 'status')
if status ~= 'pending' and status ~= 'done' then return {0, status or 'unknown'} end
local v = redis.call('GET', KEYS[2]) or '0'
redis.call('HSETNX', KEYS[1], 'cut:' .. ARGV[1], v)
return {1, redis.call('HGET', KEYS[1], 'cut:' .. ARGV[1])}
