-- The slots of one key of a capability declaring `per_key` (`majordomus.flow`), put at the
-- KEYSLOTS mark of a script by `scripts.load_script`: what create.lua, take.lua,
-- append.lua and release_slot.lua share. A key's slots (`<base>conc:<cap>:key:<key>`) are
-- held, each until a lease runs out, by its running executions and its admitted queued
-- ones; its waiting list (`...:waiting`) holds the rest by their place in line, out of the
-- queue; `<base>conc:<cap>:keys` names the keys that have some waiting.
-- Constants: SLOTS_AT, KEYED_AT, WAITING_AT, KEYSET_AT, SNAPSHOT_AT (`keys.SCRIPT_KEY_NAMES`)
--       and SLOT_MS (a slot's lease, ms).

local function key_slots_of(base, capability, key)
  return base .. SLOTS_AT .. capability .. KEYED_AT .. key
end

-- Whether execution `id` may hold a slot of its key now (it holds one, or one is free):
-- then it holds one for a lease from `now`; else it waits in the key's list at `place`.
local function key_admit(base, capability, key, limit, id, now, place)
  local slots = key_slots_of(base, capability, key)
  redis.call('ZREMRANGEBYSCORE', slots, '-inf', now)
  if not redis.call('ZSCORE', slots, id) and redis.call('ZCARD', slots) >= limit then
    redis.call('ZADD', slots .. WAITING_AT, place, id)
    redis.call('SADD', base .. SLOTS_AT .. capability .. KEYSET_AT, key)
    return false
  end
  redis.call('ZADD', slots, string.format('%d', now + SLOT_MS), id)
  return true
end

-- Move the key's next waiting executions (by place) to the back of the ready queue while
-- its slots are free, each holding a slot from now; answers how many moved.
local function key_promote(base, queue, capability, key, limit, now)
  local slots = key_slots_of(base, capability, key)
  local waiting = slots .. WAITING_AT
  redis.call('ZREMRANGEBYSCORE', slots, '-inf', now)
  local free = limit - redis.call('ZCARD', slots)
  local moved = {}
  if free > 0 then
    moved = redis.call('ZRANGE', waiting, 0, free - 1)
    local until_s = string.format('%d', now + SLOT_MS)
    for j, member in ipairs(moved) do
      redis.call('ZREM', waiting, member)
      local off = redis.call('HGET', base .. SNAPSHOT_AT .. member, 'qoffset')
      redis.call('ZADD', queue, now + j - 1 - (tonumber(off or '0') or 0), member)
      redis.call('ZADD', slots, until_s, member)
    end
  end
  if redis.call('EXISTS', waiting) == 0 then
    redis.call('SREM', base .. SLOTS_AT .. capability .. KEYSET_AT, key)
  end
  return #moved
end
