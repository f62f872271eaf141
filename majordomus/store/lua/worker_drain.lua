-- Drain or undrain a worker: its presence hash's `drain` field, set or removed, only while
-- the hash exists (a worker that is gone, or never was, gets no hash made up for it: a
-- field set there would outlive every beat). The worker reads the field with its beat.
--
-- KEYS: the worker's presence hash
-- ARGV: '1' to drain, '0' to undrain, then the time it was asked (RFC 3339 UTC)
-- Answers -1 when there is no such worker, else 1 when this changed the flag, 0 when it
-- was so already.
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if ARGV[1] == '1' then
  return redis.call('HSETNX', KEYS[1], 'drain', ARGV[2])
end
return redis.call('HDEL', KEYS[1], 'drain')
