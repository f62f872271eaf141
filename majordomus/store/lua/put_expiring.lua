-- Write a hash and its expiry in one step, so no process killed between the two leaves a
-- record that never expires (Redis 7.0 has no HSETEX; MULTI does not exist on a Cluster).
--
-- KEYS: the hash
-- ARGV: ttl ms, then field, value pairs
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
