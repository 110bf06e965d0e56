-- The cut of a forget request on one lane: the tenant's ingest counter when the request passed.
-- The first cut of a lane wins (a redelivered forget must not move it past turns sent after the
-- request).
--
-- KEYS[1] request hash   KEYS[2] the tenant's ingest counter   ARGV[1] lane
local v = redis.call('GET', KEYS[2]) or '0'
redis.call('HSETNX', KEYS[1], 'cut:' .. ARGV[1], v)
return redis.call('HGET', KEYS[1], 'cut:' .. ARGV[1])
