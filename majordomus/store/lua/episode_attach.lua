-- Open an episode for a holder, or resume the one already under this external id, and
-- take its lease. A persistent holder (an MCP session) attaching again to the episode it
-- already holds is not a new attachment.
--
-- KEYS: record, lease, episodes index
-- ARGV: external id, holder, holder kind (session|handle), timestamp, now ms,
--       held-until ms, reaper deadline ms, hold ms, grace ms
-- Returns: 1 when an existing episode was resumed, 0 when a new one was opened.
local rec, lease, idx = KEYS[1], KEYS[2], KEYS[3]
local id, holder, kind, ts, now = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local resumed = 0
if redis.call('EXISTS', rec) == 1 then
  resumed = 1
  if not (kind == 'session' and redis.call('GET', lease) == holder) then
    redis.call('HINCRBY', rec, 'attachments', 1)
  end
else
  redis.call('HSET', rec, 'external_id', id, 'opened_at', ts, 'opened_ms', now,
    'attachments', 1, 'executions', '[]', 'execution_count', 0)
end
redis.call('HSET', rec, 'state', 'open', 'holder', holder, 'holder_kind', kind,
  'last_seen_at', ts, 'last_seen_ms', now, 'held_until_ms', ARGV[6], 'grace_ms', ARGV[9])
redis.call('HDEL', rec, 'detached_at')
redis.call('SET', lease, holder, 'PX', ARGV[8])
redis.call('ZADD', idx, ARGV[7], id)
return resumed
