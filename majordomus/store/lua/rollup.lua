-- The roll-up (`Partition.rollup`, read by `store/rollup.py`), put at the ROLLUP mark of a
-- script by `scripts.load_script`: the functions take.lua and append.lua count a start
-- and an end with, in the step that moves the execution, so a count is written exactly
-- when its move is (a call sent again after a lost answer is answered from its token and
-- counts nothing twice). One HINCRBY a count; the minute's hash is given its expiry by the
-- count that makes a field (HINCRBY answering the count itself), so the key that exists
-- always has one.
-- Constants: BASE (the partition's key base), ROLLUP_STEPS (buckets per doubling),
--       ROLLUP_KEEP_MS (how long a minute is kept after it ends; 0: no roll-up, and the
--       scripts count nothing, `ROLLUP_ON`).
local ROLLUP_ON = ROLLUP_KEEP_MS > 0
local ROLLUP_PER_LN = ROLLUP_STEPS / math.log(2)
-- `<kind>:<bucket>:<capability>`: bucket `0` under 1 ms, `-` with no measure (an end never
-- started), else 1 + floor(ln(ms) * ROLLUP_STEPS / ln 2 + 1e-6) (`store/rollup.py`'s
-- `bucket_of`: the same operations in the same order, so both give one bucket; the 1e-6
-- puts a bound, 8 ms, in the bucket it begins, which rounding would miss by an ulp).
local function rollup_field(kind, ms, capability)
  local b
  if not ms then b = '-'
  elseif ms < 1 then b = '0'
  else b = string.format('%d', 1 + math.floor(math.log(ms) * ROLLUP_PER_LN + 1e-6)) end
  return kind .. ':' .. b .. ':' .. (capability or '')
end
-- The server's millisecond. Every count is put in a minute of Redis's clock (a take's `now`
-- is this), whichever process and clock sent the call, so a minute Redis's clock has left
-- takes no more counts, and a reader keeps the sum of one that is well past
-- (`RollupStore.rollup_steps`).
local function rollup_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- Add `count` to `field` of the minute of `at_ms` (epoch ms, the server's).
local function rollup_add(at_ms, field, count)
  local minute = math.floor(at_ms / 60000)
  local key = BASE .. 'rollup:' .. string.format('%d', minute)
  if redis.call('HINCRBY', key, field, count) == count then
    redis.call('PEXPIREAT', key, string.format('%d', (minute + 1) * 60000 + ROLLUP_KEEP_MS))
  end
end
