-- Renew or give up the sweeper lock if `holder` still has it, in one step (a lock that
-- lapsed and was taken by another in between is neither extended nor deleted). One key,
-- so one slot on a Redis Cluster, where WATCH does not exist.
--
-- KEYS: the lock
-- ARGV: holder, 'renew' (with ARGV[3], the new ttl ms) or 'release'
-- Answers 1 when done, 0 when the lock is not the holder's.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[2] == 'renew' then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
else
  redis.call('DEL', KEYS[1])
end
return 1
