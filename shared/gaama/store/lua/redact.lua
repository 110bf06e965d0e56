-- Redact nodes whose words the speaker asked the memory to forget: each node's text gives way
-- to a placeholder (an episode keeps its "[time] Speaker: " heading), its raw words and its
-- vector go, and it records when and why; the audit log keeps each text's SHA-1 digest.
-- A node already redacted, or gone, is left as it is.
--
-- KEYS[1] the tenant's audit list, KEYS[2..] the node hashes
-- ARGV placeholder, vector field, now, request episode id, reason, audit length bound,
--      then the node ids in the order of KEYS[2..]
-- Returns the number of nodes redacted.
local placeholder, vector_field, now = ARGV[1], ARGV[2], ARGV[3]
local request, reason, audit_max = ARGV[4], ARGV[5], tonumber(ARGV[6])
local digests, done = {}, 0
for i = 2, #KEYS do
  local key = KEYS[i]
  if redis.call('EXISTS', key) == 1 and not redis.call('HGET', key, 'redacted_at') then
    local text = redis.call('HGET', key, 'text') or ''
    local raw = redis.call('HGET', key, 'raw') or ''
    local heading = string.match(text, '^(%[[^%]]*%] [^:]+: )') or ''
    redis.call('HSET', key, 'text', heading .. placeholder, 'redacted_at', now,
      'redacted_by', request, 'redacted_reason', reason)
    redis.call('HDEL', key, 'raw', vector_field)
    digests[ARGV[5 + i]] = redis.sha1hex(text .. '\n' .. raw)
    done = done + 1
  end
end
if done > 0 then
  local entry = cjson.encode({event = 'redacted', at = tonumber(now), request = request,
    reason = reason, digests = digests})
  redis.call('LPUSH', KEYS[1], entry)
  redis.call('LTRIM', KEYS[1], 0, audit_max - 1)
end
return done
