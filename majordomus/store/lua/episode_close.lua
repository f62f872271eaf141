-- Close an episode for good and keep it as a record: deliberately (`detach`) or, when
-- nothing came back within the grace, by the reaper (`expired`). The live record is
-- renamed to the closed record's key, which expires after the retention time, so the
-- external id is free for a new episode at once.
--
-- KEYS: record, lease, episodes index, closed index, closed record
-- ARGV: external id, reason (detach|expired), timestamp, now ms, retention ms, grace ms
-- The grace is the one recorded by the replica that last renewed or released the episode,
-- so replicas agree on its deadline; ARGV's is for records written without one.
-- Returns: 1 when closed; 0 when it is not due (held again, or still within its grace;
-- its deadline is corrected); -1 when there is no such open or detached episode.
local rec, lease, idx, closed, kept = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local id, reason, ts, now = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if redis.call('EXISTS', rec) == 0 then
  redis.call('ZREM', idx, id)
  return -1
end
if reason == 'expired' then
  local held_until = tonumber(redis.call('HGET', rec, 'held_until_ms') or '0')
  local grace = tonumber(redis.call('HGET', rec, 'grace_ms') or ARGV[6])
  local deadline = held_until + grace
  -- The server's clock decides whether the grace has passed, never a replica's.
  local t = redis.call('TIME')
  local server_now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if redis.call('EXISTS', lease) == 1 or deadline > server_now then
    redis.call('ZADD', idx, deadline, id)
    return 0
  end
end
redis.call('HSET', rec, 'state', 'closed', 'close_reason', reason, 'closed_at', ts,
  'closed_ms', now)
redis.call('DEL', lease)
redis.call('ZREM', idx, id)
redis.call('RENAME', rec, kept)
redis.call('PEXPIRE', kept, ARGV[5])
redis.call('ZADD', closed, now, kept)
return 1
