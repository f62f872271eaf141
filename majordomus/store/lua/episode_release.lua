-- Detach an episode (not close it) because its holder went away: the connection ended or
-- the replica carrying it is stopping. Only the holder named can release it, so a session
-- ending late never detaches an episode another connection has since resumed.
--
-- KEYS: record, lease, episodes index
-- ARGV: external id, holder, timestamp, now ms, reaper deadline ms, grace ms
-- Returns: 1 when detached, 0 when the holder did not hold it.
local rec, lease, idx = KEYS[1], KEYS[2], KEYS[3]
if redis.call('GET', lease) ~= ARGV[2] then return 0 end
if redis.call('EXISTS', rec) == 0 then return 0 end
redis.call('DEL', lease)
redis.call('HSET', rec, 'state', 'detached', 'detached_at', ARGV[3], 'held_until_ms', ARGV[4],
  'grace_ms', ARGV[6])
redis.call('ZADD', idx, ARGV[5], ARGV[1])
return 1
