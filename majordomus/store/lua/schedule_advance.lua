-- Record a schedule's tick as done, only forward: tickers of every worker race to record
-- the same tick, and one that records an older tick late moves nothing back.
--
-- KEYS: schedule
-- ARGV: tick_ms, execution id (the execution started for it; '' for a skipped one)
-- Answers 1 when this call moved it, 0 when it was there already (or the schedule is gone:
-- a deleted schedule is not brought back by its last tick).
local sched = KEYS[1]
local tick = tonumber(ARGV[1])

if redis.call('EXISTS', sched) == 0 then return 0 end
local cur = tonumber(redis.call('HGET', sched, 'last_tick_ms') or '0') or 0
if tick <= cur then return 0 end
if ARGV[2] ~= '' then
  redis.call('HSET', sched, 'last_tick_ms', ARGV[1], 'last_execution', ARGV[2])
else
  redis.call('HSET', sched, 'last_tick_ms', ARGV[1])
end
return 1
