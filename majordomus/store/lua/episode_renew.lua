-- Renew an episode's lease for the holder whose traffic carries it.
-- A session renews only an episode it still holds (another connection may have resumed it
-- since; a session whose hold merely lapsed takes it back). A handle (2026-07-28: no
-- connection) renews whatever holds it, and takes the lease unless a session holds it.
--
-- KEYS: record, lease, episodes index
-- ARGV: external id, holder, holder kind (session|handle), timestamp, now ms,
--       held-until ms, reaper deadline ms, hold ms, grace ms, touch (1: the client spoke, so its
--       last-seen time moves; 0: the replica renews a session that is still connected)
-- Returns: 1 when renewed, 0 when the episode is unknown, closed or someone else's.
local rec, lease, idx = KEYS[1], KEYS[2], KEYS[3]
local id, holder, kind = ARGV[1], ARGV[2], ARGV[3]
if redis.call('EXISTS', rec) == 0 then return 0 end
local current = redis.call('GET', lease)
local take
if kind == 'session' then
  if current ~= holder and (current or redis.call('HGET', rec, 'holder') ~= holder) then
    return 0
  end
  take = true
else
  take = (not current) or redis.call('HGET', rec, 'holder_kind') ~= 'session'
end
if take then
  redis.call('SET', lease, holder, 'PX', ARGV[8])
  redis.call('HSET', rec, 'holder', holder, 'holder_kind', kind)
else
  redis.call('PEXPIRE', lease, ARGV[8])
end
redis.call('HSET', rec, 'state', 'open', 'held_until_ms', ARGV[6], 'grace_ms', ARGV[9])
if ARGV[10] == '1' then
  redis.call('HSET', rec, 'last_seen_at', ARGV[4], 'last_seen_ms', ARGV[5])
end
redis.call('HDEL', rec, 'detached_at')
redis.call('ZADD', idx, ARGV[7], id)
return 1
