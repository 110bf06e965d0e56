-- One read command over a batch of keys, in one call instead of one command per key: on a
-- thousand keys redis-py spends far more time encoding and dispatching single commands than
-- Redis spends answering them. All keys are declared and share the tenant's hash slot, so the
-- script is cluster-safe.
--
-- KEYS      the keys
-- ARGV[1]   the command (HGETALL, HMGET, EXISTS)   ARGV[2..] its arguments after the key
-- Returns the command's reply for each key, in order.
local cmd = ARGV[1]
local args = {}
for i = 2, #ARGV do args[#args + 1] = ARGV[i] end
local out = {}
for i = 1, #KEYS do out[i] = redis.call(cmd, KEYS[i], unpack(args)) end
return out
