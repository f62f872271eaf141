-- Append events to one execution, atomically: check each state move against the one
-- table of moves, assign the next dense sequence, write the stream entry (exactly 500 kept)
-- and the global feed entry, and fold the event into the snapshot. The first event that
-- is refused (an illegal move, or anything after a final state) stops the batch and
-- consumes no sequence.
--
-- A claim (`execution.started`, which workers write through `take.lua`; an append of it
-- is the same move) adds the execution to its worker's running set; the terminal event
-- removes every trace of it from the queue in the same step: its queue entry (a queued
-- one's), the waiting list, its worker's running set and its worker-only input, and frees
-- its concurrency slot, moving the oldest waiting execution of its capability back into
-- the queue, and its key's slot (`per_key`), moving its key's next waiting one to the back
-- of the queue (`lua/key_slots.lua`).
-- Snapshot `steps` keep the first `steps_max`; later ones are counted in `steps_dropped`.
-- A claim is counted in its minute's roll-up by its wait (from when it was due), an end by
-- its final state and duration (`lua/rollup.lua`), in this same step.
--
-- A worker's appends carry a token, kept with what the append did: the same call sent
-- again (redis-py retries a command whose connection broke, and the first send may have
-- been applied with its answer lost) is answered as the first was and changes nothing, so
-- no event is doubled and a claim is not refused by its own first half.
--
-- Constants (`StoreBase.partition_script`: one text per partition) used here: the
--       partition's FEED, QUEUED, RUNNING and FINISHED (its indexes), QUEUE, DELAYED,
--       WAKEUP (the wake-up list) and BASE (its key base, which names a worker's running
--       set and a capability's slots); ROLLUP_STEPS and ROLLUP_KEEP_MS (the roll-up's);
--       RETAIN (seconds a final execution is kept),
--       FEED_MAX, STREAM_MAX, STEPS_MAX, WAKE and CANCEL (the channels).
-- KEYS: snapshot, events, secret input
-- ARGV: id, timestamp, now_ms, worker, n, token ('' for none), then n pairs (type, data
--       JSON or ''), then the options a call has, as (name, value) pairs: secret ('1':
--       answer the worker-only input too, for a claim), lapsed (a worker's lease key:
--       nothing is appended while it exists). A worker's report or end has none: every
--       argument costs Redis about as much as a small command.
-- The one table of moves (`from>to`, and `state!` for a final state) and the state each
-- state-changing event type moves to (`type=state`), from majordomus.states.
local MOVES = --@MOVES@
local STATE_OF = --@STATE_OF@
--@ROLLUP@
--@ENVELOPE@
--@KEYSLOTS@

local snap, stream = KEYS[1], KEYS[2]
-- Text becomes a number only where arithmetic needs one (Lua reads a number with strtod
-- and writes one with sprintf, each about the cost of a small command here); numbers are
-- written with %d, not Lua's own %.14g.
local id, ts = ARGV[1], ARGV[2]
local worker, n, token = ARGV[4], tonumber(ARGV[5]), ARGV[6]
local FIRST = 6  -- the ARGV index after which the (type, data) pairs begin
local opt = {}
for i = FIRST + 2 * n + 1, #ARGV, 2 do opt[ARGV[i]] = ARGV[i + 1] end
local read_secret, lapsed = opt.secret, opt.lapsed

-- The snapshot is read for what this batch needs: a field Redis does not find costs it a
-- read of every field (a small hash is a list), and most batches are reports. The steps
-- and diagnostics (up to their caps, kilobytes) are read only by a batch that has a step
-- or a diagnostic in it.
local want_end, want_diag, want_steps = false, false, false
for i = 1, n do
  local t = ARGV[FIRST - 1 + 2 * i]  -- (Lua compares interned strings by address)
  if t == 'execution.progress' or t == 'execution.log' then
    -- a report: the state and the sequence
  elseif t == 'execution.diagnostic' then
    want_diag = true
  elseif t == 'execution.step.started' or t == 'execution.step.completed' then
    want_steps = true
  else
    want_end = true  -- a claim, a cancel or an end (or a type this script does not know)
  end
end
local at_token, at_end, at_diag, at_steps = 0, 0, 0, 0
local cur
if token ~= '' and not want_diag and not want_steps then  -- a worker's batch, most often
  at_token = 3
  if want_end then
    cur = redis.call('HMGET', snap, 'state', 'last_seq', 'append_token', 'capability',
      'conc_limit', 'worker', 'started_ms', 'flow')
    at_end = 4
  else
    cur = redis.call('HMGET', snap, 'state', 'last_seq', 'append_token')
  end
else
  local ask = {'state', 'last_seq'}
  if token ~= '' then ask[#ask + 1] = 'append_token'; at_token = #ask end
  if want_end then
    ask[#ask + 1] = 'capability'; ask[#ask + 1] = 'conc_limit'; ask[#ask + 1] = 'worker'
    ask[#ask + 1] = 'started_ms'; ask[#ask + 1] = 'flow'
    at_end = #ask - 4
  end
  if want_diag then ask[#ask + 1] = 'diag_count'; at_diag = #ask end
  if want_steps then ask[#ask + 1] = 'steps_dropped'; at_steps = #ask end
  cur = redis.call('HMGET', snap, unpack(ask))
end
local state = cur[1]
if not state then return {-1, 0, '', 0} end
-- The sweeper fails a lost worker's execution only while that worker's lease is lapsed: one
-- that renewed it since the sweeper looked (back from an outage) keeps what it runs.
if lapsed and redis.call('EXISTS', lapsed) == 1 then return {0, tonumber(cur[2]), state, 0} end
local was_token = at_token > 0 and cur[at_token]
if was_token then
  local was, was_code, was_seq, was_applied = string.match(was_token, '^(.*) (%d) (%d+) (%d+)$')
  if was == token then
    local answer = {tonumber(was_code), tonumber(was_seq), state, tonumber(was_applied)}
    if read_secret and answer[4] == n then answer[5] = redis.call('GET', KEYS[3]) end
    return answer
  end
end
local seq = tonumber(cur[2])
local diags, diag_count = nil, at_diag > 0 and tonumber(cur[at_diag] or '0') or 0
local capability, conc_limit, owner, started_ms = nil, 0, nil, nil
local flow = nil  -- its flow control's mark (`k`: a limit per key; create.lua)
if at_end > 0 then
  capability, owner, started_ms = cur[at_end], cur[at_end + 2], cur[at_end + 3]
  conc_limit = cur[at_end + 1] and tonumber(cur[at_end + 1]) or 0
  flow = cur[at_end + 4]
end
local steps_dropped = at_steps > 0 and tonumber(cur[at_steps] or '0') or 0
local steps_max = STEPS_MAX
local function read_steps() return cjson.decode(redis.call('HGET', snap, 'steps') or '[]') end
local changed_started = nil  -- started_ms of a claim in this very batch
local steps = nil
-- Made with room for sixteen (the fields an end writes): a table grown one item at a time
-- is copied at 1, 2, 4 and 8 items.
local changed = {nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil}
local applied = 0

local function is_final(s) return string.find(MOVES, ' ' .. s .. '! ', 1, true) ~= nil end
local function target_of(t)
  local _, e = string.find(STATE_OF, ' ' .. t .. '=', 1, true)
  if not e then return nil end
  return string.match(STATE_OF, '^[^ ]+', e + 1)
end
local progress = nil
local last_sq = cur[2]  -- the last sequence as a string (Redis would format a number)

for i = 1, n do
  local t, d = ARGV[FIRST - 1 + 2 * i], ARGV[FIRST + 2 * i]
  if is_final(state) then break end
  local target = target_of(t)
  if target and not string.find(MOVES, ' ' .. state .. '>' .. target .. ' ', 1, true) then break end
  local from = state
  seq = seq + 1
  local sq = string.format('%d', seq)
  last_sq = sq
  local env = envelope(id, sq, ts, t, d)
  redis.call('XADD', stream, 'MAXLEN', STREAM_MAX, sq .. '-0', 'e', env)
  redis.call('XADD', FEED, 'MAXLEN', '~', FEED_MAX, '*', 'x', id, 's', sq, 'e', env)
  applied = applied + 1
  if target then
    state = target
    if t == 'execution.started' then
      redis.call('HINCRBY', snap, 'attempt', 1)
      changed[#changed + 1] = 'started_at'; changed[#changed + 1] = ts
      changed[#changed + 1] = 'started_ms'; changed[#changed + 1] = ARGV[3]
      changed_started = ARGV[3]
      if worker ~= '' then
        changed[#changed + 1] = 'worker'; changed[#changed + 1] = worker
        owner = worker
        redis.call('SADD', BASE .. WORKER_AT .. worker .. RUNNING_AT, id)
      end
      local due_at = ROLLUP_ON and redis.call('ZSCORE', QUEUED, id)
      if due_at then
        local waited = math.max(0, tonumber(ARGV[3]) - tonumber(due_at))
        rollup_add(rollup_now(), rollup_field('w', waited, capability), 1)
      end
      redis.call('ZREM', QUEUED, id)
      redis.call('ZREM', QUEUE, id)  -- claimed by an append, not take.lua: its entry goes too
      redis.call('ZADD', RUNNING, ARGV[3], id)
    elseif t == 'execution.cancelling' then
      redis.call('PUBLISH', CANCEL, id)
    else
      if t == 'execution.completed' then
        changed[#changed + 1] = 'output'; changed[#changed + 1] = string.sub(d, 11, -2)
      elseif t == 'execution.failed' then
        changed[#changed + 1] = 'error'; changed[#changed + 1] = string.sub(d, 10, -2)
      elseif t == 'execution.cancelled' then
        -- SPEC 2: a cancelled execution carries error.code = "cancelled".
        changed[#changed + 1] = 'error'
        changed[#changed + 1] = '{"code":"cancelled","message":"the execution was cancelled",' ..
          '"correlation_id":"' .. id .. '"}'
      end
      changed[#changed + 1] = 'finished_at'; changed[#changed + 1] = ts
      local started = started_ms or changed_started
      local took = nil
      if started then
        took = tonumber(ARGV[3]) - tonumber(started)
        changed[#changed + 1] = 'duration_ms'
        changed[#changed + 1] = string.format('%d', took)
      end
      if ROLLUP_ON then
        local kind = 'c'
        if target == 'succeeded' then kind = 's' elseif target == 'failed' then kind = 'f' end
        rollup_add(rollup_now(), rollup_field(kind, took and math.max(0, took), capability), 1)
      end
      if from == 'queued' then  -- never taken: it is still in the queue
        redis.call('ZREM', QUEUED, id)
        redis.call('ZREM', QUEUE, id)
        redis.call('ZREM', DELAYED, id)
      else
        redis.call('ZREM', RUNNING, id)
      end
      redis.call('ZADD', FINISHED, ARGV[3], id)
      redis.call('DEL', KEYS[3])
      if owner then redis.call('SREM', BASE .. WORKER_AT .. owner .. RUNNING_AT, id) end
      if conc_limit > 0 then
        -- Free the slot and move the oldest waiting ones back into the queue (as
        -- release_slot.lua does), so a slot never waits for a worker to notice.
        local slots = BASE .. SLOTS_AT .. capability
        local waiting = slots .. WAITING_AT
        redis.call('ZREM', waiting, id)
        redis.call('ZREM', slots, id)
        local clock = redis.call('TIME')
        local at = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
        redis.call('ZREMRANGEBYSCORE', slots, '-inf', at)
        local free = conc_limit - redis.call('ZCARD', slots)
        if free > 0 then
          local oldest = redis.call('ZRANGE', waiting, 0, free - 1)
          for j, member in ipairs(oldest) do
            redis.call('ZREM', waiting, member)
            local off = redis.call('HGET', BASE .. SNAPSHOT_AT .. member, 'qoffset')
            redis.call('ZADD', QUEUE, at + j - 1 - (tonumber(off or '0') or 0), member)
          end
          if #oldest > 0 then
            redis.call('PUBLISH', WAKE, oldest[1])
            redis.call('LPUSH', WAKEUP, oldest[1])
            redis.call('LTRIM', WAKEUP, 0, 15)
          end
        end
      end
      local key_limit, conc_key = nil, nil
      if flow and string.find(flow, 'k', 1, true) then
        local kl = redis.call('HMGET', snap, 'key_limit', 'conc_key')
        key_limit, conc_key = kl[1], kl[2]
      end
      if key_limit then
        -- Its key's slot freed (or its place in the key's waiting list left), and the
        -- key's next waiting ones moved to the back of the queue (`lua/key_slots.lua`).
        local slots = key_slots_of(BASE, capability, conc_key)
        redis.call('ZREM', slots .. WAITING_AT, id)
        redis.call('ZREM', slots, id)
        local clock = redis.call('TIME')
        local at = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
        if key_promote(BASE, QUEUE, capability, conc_key, tonumber(key_limit), at) > 0 then
          redis.call('PUBLISH', WAKE, id)
          redis.call('LPUSH', WAKEUP, id)
          redis.call('LTRIM', WAKEUP, 0, 15)
        end
      end
    end
  elseif t == 'execution.progress' then
    -- Only the last report of the batch is folded: the snapshot keeps the latest.
    progress = d
  elseif t == 'execution.step.started' then
    steps = steps or read_steps()
    local s = cjson.decode(d)
    if #steps < steps_max then
      steps[#steps + 1] = {name = s.name, title = s.title, state = 'running', started_at = ts}
    else
      steps_dropped = steps_dropped + 1
    end
  elseif t == 'execution.step.completed' then
    steps = steps or read_steps()
    local s = cjson.decode(d)
    local found = nil
    for j = #steps, 1, -1 do
      if steps[j].name == s.name and steps[j].state == 'running' then found = steps[j]; break end
    end
    if not found and #steps < steps_max then
      found = {name = s.name, title = s.name, started_at = ts}
      steps[#steps + 1] = found
    end  -- past the cap a step is counted once, when it starts
    if found then
      found.state = s.ok and 'completed' or 'failed'
      found.finished_at = ts
      if s.detail and s.detail ~= cjson.null then found.detail = s.detail end
    end
  elseif t == 'execution.diagnostic' then
    if diag_count < 200 then
      if diag_count == 0 then
        diags = '[' .. d .. ']'
      else
        diags = diags or redis.call('HGET', snap, 'diagnostics')
        diags = string.sub(diags, 1, -2) .. ',' .. d .. ']'
      end
      diag_count = diag_count + 1
      changed[#changed + 1] = 'diagnostics'; changed[#changed + 1] = diags
      changed[#changed + 1] = 'diag_count'; changed[#changed + 1] = string.format('%d', diag_count)
    end
  end
end

local code = 1
if applied < n then code = 0 end
if applied > 0 then
  if token ~= '' then
    changed[#changed + 1] = 'append_token'
    changed[#changed + 1] = string.format('%s %d %s %d', token, code, last_sq, applied)
  end
  if progress then
    changed[#changed + 1] = 'progress'; changed[#changed + 1] = progress
  end
  if steps then
    changed[#changed + 1] = 'steps'
    changed[#changed + 1] = (#steps == 0) and '[]' or cjson.encode(steps)
    changed[#changed + 1] = 'steps_dropped'; changed[#changed + 1] = string.format('%d', steps_dropped)
  end
  changed[#changed + 1] = 'state'; changed[#changed + 1] = state
  changed[#changed + 1] = 'last_seq'; changed[#changed + 1] = last_sq
  redis.call('HSET', snap, unpack(changed))
  if is_final(state) then
    redis.call('EXPIRE', snap, RETAIN)
    redis.call('EXPIRE', stream, RETAIN)
  end
end
if read_secret and applied == n then
  return {code, seq, state, applied, redis.call('GET', KEYS[3])}
end
return {code, seq, state, applied}
