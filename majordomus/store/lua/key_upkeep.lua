-- The upkeep of a capability's keys (`per_key`, `majordomus.flow`) in one partition: for up
-- to 64 of its keys that have executions waiting (drawn at random, so every key's turn
-- comes however many there are), move the next waiting ones to the queue while the key's
-- slots are free. A slot frees itself by its holder's terminal event (append.lua); this is
-- for slots whose lease ran out without one (a holder lost with its worker, an admitted
-- one whose lease lapsed), run by the sweeper's upkeep like release_slot.lua.
-- Constants (`StoreBase.partition_script`): BASE, QUEUE, WAKEUP, WAKE, the key names.
-- KEYS: the capability's set of keys with waiting ones (`Partition.keys_waiting`)
-- ARGV: capability, its limit per key
-- Answers how many moved.
--@KEYSLOTS@
local capability, limit = ARGV[1], tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local moved = 0
for _, key in ipairs(redis.call('SRANDMEMBER', KEYS[1], 64)) do
  moved = moved + key_promote(BASE, QUEUE, capability, key, limit, now)
end
if moved > 0 then
  redis.call('PUBLISH', WAKE, capability)
  redis.call('LPUSH', WAKEUP, capability)
  redis.call('LTRIM', WAKEUP, 0, 15)
end
return moved
