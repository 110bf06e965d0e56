-- Mark a pending forget request done, lift its hide marker and audit it, atomically. A request
-- no longer pending (abandoned, done, unknown) is left as it is.
--
-- KEYS[1] request hash   KEYS[2] its pending lanes   KEYS[3] the hide markers
-- KEYS[4] the audit log
-- ARGV[1] removed (JSON)   ARGV[2] done at   ARGV[3] hide-marker field   ARGV[4] audit entry
-- ARGV[5] audit length kept
-- Returns 1 when the request was marked done, 0 when it was not pending.
if redis.call('HGET', KEYS[1], 'status') ~= 'pending' then return 0 end
redis.call('HSET', KEYS[1], 'status', 'done', 'removed', ARGV[1], 'done_at', ARGV[2])
redis.call('DEL', KEYS[2])
redis.call('HDEL', KEYS[3], ARGV[3])
redis.call('LPUSH', KEYS[4], ARGV[4])
redis.call('LTRIM', KEYS[4], 0, tonumber(ARGV[5]) - 1)
return 1
