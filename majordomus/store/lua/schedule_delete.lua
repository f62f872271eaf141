-- Delete a schedule, atomically, only if its origin is one the caller may delete
-- (`schedules.delete` deletes created ones; a worker's sync forgets declared ones that the
-- code no longer declares).
--
-- KEYS: schedule, schedules (index), schedules version
-- ARGV: id, the origins that may be deleted (space-separated)
-- Answers 1 deleted, -1 refused (its origin), 0 no such schedule.
local sched, index, version = KEYS[1], KEYS[2], KEYS[3]
local id, allowed = ARGV[1], ' ' .. ARGV[2] .. ' '

local origin = redis.call('HGET', sched, 'origin')
if not origin then
  redis.call('ZREM', index, id)
  return 0
end
if not string.find(allowed, ' ' .. origin .. ' ', 1, true) then return -1 end
redis.call('DEL', sched)
redis.call('ZREM', index, id)
redis.call('INCR', version)
return 1
