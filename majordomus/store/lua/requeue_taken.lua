-- Put back into the queue the jobs that were taken off it longer ago than a lease and never
-- claimed (the worker that took them died in between), so no execution stays `queued`
-- outside the queue. A taken job whose execution is no longer queued just leaves the set.
--
-- KEYS: the taken set, arq queue
-- ARGV: older than (ms), batch size, key prefix, wake channel
-- (the snapshot and in-progress keys of each are `Keys.snapshot` and `Keys.in_progress`)
local taken, queue = KEYS[1], KEYS[2]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local stale = redis.call('ZRANGEBYSCORE', taken, '-inf', now - tonumber(ARGV[1]),
  'LIMIT', 0, tonumber(ARGV[2]))
local back = 0
for _, id in ipairs(stale) do
  redis.call('ZREM', taken, id)
  local snap = ARGV[3] .. ':x:{' .. id .. '}'
  if redis.call('HGET', snap, 'state') == 'queued' then
    redis.call('DEL', ARGV[3] .. ':in-progress:{' .. id .. '}')
    redis.call('ZADD', queue, redis.call('HGET', snap, 'created_ms'), id)
    back = back + 1
  end
end
if back > 0 then redis.call('PUBLISH', ARGV[4], 'requeued') end
return back
