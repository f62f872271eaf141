-- Take one queued job for this worker, or say why not, in one atomic step. The queue holds
-- only work that can run: a taken job leaves it here (so no worker reads a running job
-- again), a job whose execution is no longer queued (final, running, or forgotten) is
-- dropped from it, and a job held back by its capability's `max_concurrency` moves to the
-- capability's waiting list (out of the queue: waiting costs no worker and no traffic)
-- until a slot holder's terminal event moves the oldest back (append.lua).
-- Times are the server's (`TIME`), so a worker with a skewed clock frees nobody's slot.
--
-- KEYS: arq queue, arq in-progress key of the job, the execution's snapshot, the taken set
-- ARGV: job id, in-progress timeout ms, slot lease ms, key prefix
-- Answers {the job's queue score, its capability} when taken (the worker runs it from this
-- alone, never reading arq's job back); 'waiting' when it waits for a slot; false when
-- there is nothing to take (not in the queue, not due, or dropped as stale).
local queue, in_progress, snap, taken = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local id, in_progress_ms, slot_ms, prefix = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local score = redis.call('ZSCORE', queue, id)
if not score or tonumber(score) > now then return false end
local cur = redis.call('HMGET', snap, 'state', 'capability', 'conc_limit', 'order')
if cur[1] ~= 'queued' or redis.call('EXISTS', in_progress) == 1 then
  redis.call('ZREM', queue, id)
  return false
end
local limit = tonumber(cur[3] or '0') or 0
if limit > 0 then
  local slots = prefix .. ':conc:' .. cur[2]
  redis.call('ZREMRANGEBYSCORE', slots, '-inf', now)
  if not redis.call('ZSCORE', slots, id) and redis.call('ZCARD', slots) >= limit then
    redis.call('ZREM', queue, id)
    redis.call('ZADD', slots .. ':waiting', cur[4] or score, id)  -- first come, first served
    return 'waiting'
  end
  redis.call('ZADD', slots, now + slot_ms, id)
end
redis.call('ZREM', queue, id)
redis.call('ZADD', taken, now, id)
redis.call('SET', in_progress, '1', 'PX', in_progress_ms)
return {score, cur[2]}
