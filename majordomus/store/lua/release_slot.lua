-- Free a capability's concurrency slot (when given a holder) and move the oldest waiting
-- executions back into the queue while slots are free, first come first served across
-- every worker, waking idle workers. Called with no holder it only promotes: a worker's
-- beat does that for capabilities whose slots ran out without a terminal event.
--
-- Constants: the names of the keys it finds from the partition's base (`keys.SCRIPT_KEY_NAMES`).
-- KEYS: the capability's slot set, its waiting list, arq queue
-- ARGV: holder execution id or '', limit, wake channel, the partition's key base
local slots, waiting, queue = KEYS[1], KEYS[2], KEYS[3]
local holder, limit, wake, prefix = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if holder ~= '' then redis.call('ZREM', slots, holder) end
redis.call('ZREMRANGEBYSCORE', slots, '-inf', now)
local free = limit - redis.call('ZCARD', slots)
if free <= 0 then return 0 end
-- Waiting ones are scored by creation order; back in the queue each is ready now, a
-- millisecond apart, so the queue keeps their order too, less its priority's head start.
local oldest = redis.call('ZRANGE', waiting, 0, free - 1)
for i, member in ipairs(oldest) do
  redis.call('ZREM', waiting, member)
  local off = redis.call('HGET', prefix .. SNAPSHOT_AT .. member, 'qoffset')
  redis.call('ZADD', queue, now + i - 1 - (tonumber(off or '0') or 0), member)
end
if #oldest > 0 then
  redis.call('PUBLISH', wake, oldest[1])
  redis.call('LPUSH', prefix .. WAKEUP_AT, oldest[1])
  redis.call('LTRIM', prefix .. WAKEUP_AT, 0, 15)
end
return #oldest
