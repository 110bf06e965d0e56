-- Rewrite the degree index entry of each node from HLEN of its adjacency, so a redelivery or a
-- repeated edge changes nothing. Queued into the transaction that wrote the adjacency. The
-- expansion reads the degrees of a whole ring in one HMGET instead of one HLEN per node: on a
-- large keyspace each key lookup is a few cache misses.
--
-- KEYS[1] the degree index   ARGV[1] adjacency key prefix   ARGV[2..] node ids
for i = 2, #ARGV do
  redis.call('HSET', KEYS[1], ARGV[i], redis.call('HLEN', ARGV[1] .. ARGV[i]))
end
return #ARGV - 1
