-- Replace hash values only where they are still what the caller read: a field whose value has
-- changed or gone since (a concurrent write or forget) is left alone.
--
-- KEYS[1] a hash   ARGV field, value read, new value; field, value read, new value; ...
-- Returns the number of values replaced.
local n = 0
for i = 1, #ARGV, 3 do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 2])
    n = n + 1
  end
end
return n
