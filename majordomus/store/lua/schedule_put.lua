-- Store a schedule's definition, atomically: `create` only when the id is free (a created
-- schedule never replaces another), `declare` in place (a declared schedule synced at a
-- worker's start: its definition and origin are the code's, its pause and last tick stay).
-- A declaration that changed starts from now (`since_ms`): the ticks of its old definition
-- are not caught up under the new one. A change increments the version, so every ticker
-- reloads at its next wake.
--
-- KEYS: schedule, schedules (index), schedules version
-- ARGV: id, definition JSON, origin, timestamp, now_ms, mode ('create' | 'declare')
-- Answers 1 stored, 0 the id is taken (create), 2 unchanged (declare).
local sched, index, version = KEYS[1], KEYS[2], KEYS[3]
local id, definition, origin, ts, now, mode = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]

if redis.call('EXISTS', sched) == 1 then
  if mode == 'create' then return 0 end
  local cur = redis.call('HMGET', sched, 'definition', 'origin')
  if cur[1] == definition and cur[2] == origin then return 2 end
  redis.call('HSET', sched, 'definition', definition, 'origin', origin, 'since_ms', now)
else
  redis.call('HSET', sched, 'id', id, 'definition', definition, 'origin', origin,
    'created_at', ts, 'created_ms', now, 'since_ms', now)
  redis.call('ZADD', index, now, id)
end
redis.call('INCR', version)
return 1
