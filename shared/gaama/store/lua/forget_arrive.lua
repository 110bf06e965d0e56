-- A forget request reached the last stage on one lane: count the lane in.
-- Only a pending request counts lanes: an unknown, abandoned or done one is left as it is.
--
-- KEYS[1] request hash   KEYS[2] its pending lanes   ARGV[1] lane
-- Returns {1, lanes still pending} or {0, reason}: 'unknown' (no such request) or the
-- request's status.
local status = redis.call('HGET', KEYS[1], 'status')
if status ~= 'pending' then return {0, status or 'unknown'} end
redis.call('SREM', KEYS[2], ARGV[1])
return {1, redis.call('SCARD', KEYS[2])}
