-- Pause or resume a schedule, atomically. A resumed schedule starts from now: the ticks
-- that fell while it was paused are neither started nor missed (`since_ms`).
--
-- KEYS: schedule, schedules version
-- ARGV: '1' pause | '0' resume, timestamp, now_ms
-- Answers 1 changed, 2 already so, 0 no such schedule.
local sched, version = KEYS[1], KEYS[2]
local pause, ts, now = ARGV[1], ARGV[2], ARGV[3]

if redis.call('EXISTS', sched) == 0 then return 0 end
local paused = redis.call('HEXISTS', sched, 'paused_at') == 1
if pause == '1' then
  if paused then return 2 end
  redis.call('HSET', sched, 'paused_at', ts)
else
  if not paused then return 2 end
  redis.call('HDEL', sched, 'paused_at')
  redis.call('HSET', sched, 'since_ms', now)
end
redis.call('INCR', version)
return 1
