-- Take one of a capability's cluster-wide concurrency slots, or say there is none.
-- A slot is a member of a sorted set scored by when its holder's claim runs out, so a
-- slot held by a dead worker frees itself.
-- KEYS: the capability's slot set. ARGV: execution id, now_ms, expiry_ms, limit
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[2])
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
  return 1
end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[4]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
return 1
