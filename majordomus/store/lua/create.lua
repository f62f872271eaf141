-- Create one execution and enqueue it, atomically: the snapshot, `execution.created` (1)
-- and `execution.queued` (2), the indexes, the worker-only input, its queue entry, and the
-- wake-up signal idle workers wait on. Nothing exists if any part does not. The snapshot
-- is the job: a worker takes the execution by its id (`take.lua`), nothing else is kept.
-- The same call sent twice creates one execution and answers both alike.
--
-- KEYS: snapshot, events, feed, idx:all, idx:queued, secret input, queue,
--       the creation counter (idx:all is scored by it, so newest-first is exact)
-- ARGV: id, timestamp, now_ms, feed_max, capability, title, input JSON (redacted),
--       cancellable, actor, episode, secret JSON or '', secret ttl ms,
--       created data JSON, wake channel, max_concurrency (0: none)
local snap, stream, feed = KEYS[1], KEYS[2], KEYS[3]
local id, ts, now, feed_max = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local was = redis.call('HMGET', snap, 'created_ms', 'ahead')
if was[1] then
  -- This very call sent again (its answer was lost and the client retried): the same
  -- answer. Ids are fresh per start, so any other existing id is an error.
  if was[1] == now and was[2] then return tonumber(was[2]) end
  return -1
end
local ahead = redis.call('ZCARD', KEYS[5])
local order = redis.call('INCR', KEYS[8])
local fields = {'id', id, 'capability', ARGV[5], 'title', ARGV[6], 'input', ARGV[7],
  'cancellable', ARGV[8], 'actor', ARGV[9], 'state', 'queued', 'created_at', ts,
  'created_ms', now, 'last_seq', 2, 'attempt', 0, 'steps', '[]', 'diagnostics', '[]',
  'diag_count', 0, 'ahead', ahead, 'order', order}
if ARGV[10] ~= '' then fields[#fields + 1] = 'episode'; fields[#fields + 1] = ARGV[10] end
if ARGV[15] ~= '0' then fields[#fields + 1] = 'conc_limit'; fields[#fields + 1] = ARGV[15] end
redis.call('HSET', snap, unpack(fields))
local head = '{"schema_version":"1","event_id":"' .. id .. '#'
local mid = '","execution_id":"' .. id .. '","sequence":'
local e1 = head .. '1' .. mid .. '1,"timestamp":"' .. ts .. '","type":"execution.created","data":' .. ARGV[13] .. '}'
local e2 = head .. '2' .. mid .. '2,"timestamp":"' .. ts .. '","type":"execution.queued","data":{"ahead":' .. ahead .. '}}'
redis.call('XADD', stream, '1-0', 'e', e1)
redis.call('XADD', stream, '2-0', 'e', e2)
redis.call('XADD', feed, 'MAXLEN', '~', feed_max, '*', 'x', id, 's', 1, 'e', e1)
redis.call('XADD', feed, 'MAXLEN', '~', feed_max, '*', 'x', id, 's', 2, 'e', e2)
redis.call('ZADD', KEYS[4], order, id)
redis.call('ZADD', KEYS[5], now, id)
if ARGV[11] ~= '' then redis.call('SET', KEYS[6], ARGV[11], 'PX', ARGV[12]) end
redis.call('ZADD', KEYS[7], now, id)
redis.call('PUBLISH', ARGV[14], id)
return ahead
