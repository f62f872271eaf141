-- Take up to `count` due executions off the queue and start them on this worker, in one
-- atomic step: the poll, the take and the claim of every one of them (`execution.started`,
-- its worker, its attempt, the indexes, the worker's running set, its worker-only input)
-- are one call, so a busy worker makes one round trip per batch of starts, and no
-- execution is ever taken without being started (nothing lies between the two for a
-- dying worker to strand). The queue holds only work that can run: an entry whose
-- execution is no longer queued (final, or forgotten) is dropped, and one held back by
-- its capability's `max_concurrency` moves to the capability's waiting list (out of the
-- queue, costing no worker and no traffic) until a slot holder's terminal event moves the
-- oldest back (append.lua); one over its key's limit (`per_key`), to its key's waiting
-- list, the same way (`lua/key_slots.lua`). Times of due and slots are the server's (`TIME`).
--
-- A worker whose lease has lapsed takes nothing (the sweeper fails what a lapsed worker
-- runs): it answers 'lapsed', and the worker beats first.
--
-- The same call sent again (its answer lost to a broken connection, and redis-py's retry,
-- or the worker's next poll, sends it with the same token) answers the executions the
-- first send started that are still this worker's, and takes nothing more: the worker's
-- last take (token and ids) is kept under `worker:<id>:take` (`TAKE_KEPT_SECONDS`).
--
-- Work due later waits in the delayed set; each take first moves what has come due into
-- the ready queue at its place in line (its due time less its priority's head start,
-- `qoffset`), then takes from the queue's head: the lowest place first, so higher
-- priorities first and, within one, first come first served.
--
-- Each start is counted in its minute's roll-up (`lua/rollup.lua`) by its wait: from when it
-- was due (its score in the queued index: created, or its start_at) to now.
--
-- Constants (`StoreBase.partition_script`: one text per partition) used here: the
--       partition's QUEUE, QUEUED, RUNNING (its indexes), FEED, DELAYED, WAKEUP and BASE
--       (its key base); FEED_MAX, ROLLUP_STEPS and ROLLUP_KEEP_MS (`lua/rollup.lua`),
--       SLOT_MS (a concurrency slot's lease, ms), TAKE_TTL (ms the last take is kept).
-- KEYS: the worker's running set, its lease, its last take
-- ARGV: count, worker, timestamp ('': the server's, now), token, then for a take behind a
--       blocking pop (`QueueStore.take_blocking`) the worker's woken list and its stopping
--       key ('' and '' for a plain take)
--
-- Behind a blocking pop of the wake-up list, the take runs as soon as the pop is served, in
-- the same turn of the server: it takes only when the pop moved a wake-up into the woken
-- list (a pop that timed out, or was let go, takes nothing) and the worker is not stopping
-- (a stopping worker's wake-up goes back on the list, for another worker).
-- Answers {next due (epoch ms: now while ready work is left) or false, then 4 items per
-- execution started: id, capability, worker-only input or false, its sequence}; or 'lapsed'.
local mine, lease, last = KEYS[1], KEYS[2], KEYS[3]
local count, worker, ts, token = tonumber(ARGV[1]), ARGV[2], ARGV[3], ARGV[4]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- `now` as Redis takes it: formatted once here (Redis formats a Lua number argument with
-- snprintf('%.17g') each time it is passed, which costs more than most commands here).
local now_s = string.format('%d', now)
--@ROLLUP@
--@ENVELOPE@
--@KEYSLOTS@

-- Epoch ms as the store's timestamps (RFC 3339 UTC, milliseconds): the calendar from the
-- day count (H. Hinnant's days-to-civil), for a take whose timestamp is the server's.
local function stamp(ms)
  local s = math.floor(ms / 1000)
  local days = math.floor(s / 86400)
  local rem = s - days * 86400
  local z = days + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524)
    - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local d = doy - math.floor((153 * mp + 2) / 5) + 1
  local m = mp < 10 and mp + 3 or mp - 9
  local y = yoe + era * 400
  if m <= 2 then y = y + 1 end
  return string.format('%04d-%02d-%02dT%02d:%02d:%02d.%03dZ', y, m, d,
    math.floor(rem / 3600), math.floor(rem % 3600 / 60), rem % 60, ms % 1000)
end
-- A take that waited behind a blocking pop runs later than it was sent: its `started` is
-- stamped when it runs (it is sent with no timestamp).
if ts == '' then ts = stamp(now) end

-- A rate limit's bucket (`majordomus.flow.RateLimit`) holds the time (epoch ms) its next
-- start is due at the limit's pace; once that is past, the bucket is full, as if absent.
local function rate_keep(bucket, next_at)
  redis.call('SET', bucket, string.format('%.3f', next_at), 'PX',
    string.format('%d', math.ceil(next_at - now) + 1))
end

-- An execution over its rate limit, given its turn at `due`: kept in the snapshot (it takes
-- no other turn then), said by its `due_at` and by an `execution.diagnostic`.
local function rate_held(id, snap, cur, due)
  local seq = tonumber(cur[5]) + 1
  local sq = string.format('%d', seq)
  local due_s, at = string.format('%d', due), stamp(due)
  local d = '{"severity":"info","code":"rate_limit.held","summary":"held by its ' ..
    'capability\'s rate limit: its turn comes at ' .. at .. '"}'
  local env = envelope(id, sq, ts, 'execution.diagnostic', d)
  redis.call('XADD', snap .. EVENTS_AT, sq .. '-0', 'e', env)
  redis.call('XADD', FEED, 'MAXLEN', '~', FEED_MAX, '*', 'x', id, 's', sq, 'e', env)
  local had = redis.call('HMGET', snap, 'diag_count', 'diagnostics')
  local n = tonumber(had[1] or '0') or 0
  local fields = {'last_seq', sq, 'rate_due', due_s, 'due_ms', due_s, 'due_at', at}
  if n < 200 then  -- the snapshot keeps the first 200, as append.lua does
    local list = '[' .. d .. ']'
    if n > 0 and had[2] then list = string.sub(had[2], 1, -2) .. ',' .. d .. ']' end
    fields[#fields + 1] = 'diagnostics'; fields[#fields + 1] = list
    fields[#fields + 1] = 'diag_count'; fields[#fields + 1] = string.format('%d', n + 1)
  end
  redis.call('HSET', snap, unpack(fields))
end

local function next_due()
  if redis.call('ZCARD', QUEUE) > 0 then return now end
  local head = redis.call('ZRANGE', DELAYED, 0, 0, 'WITHSCORES')
  if head[2] then return head[2] end
  return false
end

local before = redis.call('GET', last)
if before and string.sub(before, 1, #token + 1) == token .. ' ' then
  local out = {next_due()}
  for id in string.gmatch(string.sub(before, #token + 2), '%S+') do
    local snap = BASE .. SNAPSHOT_AT .. id
    local cur = redis.call('HMGET', snap, 'state', 'capability', 'worker', 'last_seq',
      'timeout_ms')
    if (cur[1] == 'running' or cur[1] == 'cancelling') and cur[3] == worker then
      out[#out + 1] = id
      out[#out + 1] = cur[2]
      out[#out + 1] = redis.call('GET', snap .. INPUT_AT)
      out[#out + 1] = tonumber(cur[4])
      out[#out + 1] = cur[5]  -- its start's own timeout (ms), or false
    end
  end
  return out
end
local woken, stopping = ARGV[5] or '', ARGV[6] or ''
if woken ~= '' then
  local got = redis.call('LPOP', woken)
  if not got then return {next_due()} end
  if redis.call('EXISTS', stopping) == 1 then
    redis.call('LPUSH', WAKEUP, got)
    return {next_due()}
  end
end
if redis.call('EXISTS', lease) == 0 then return 'lapsed' end

-- What has come due moves into the ready queue (a bounded batch; the rest next time).
local ripe = redis.call('ZRANGEBYSCORE', DELAYED, '-inf', now_s, 'WITHSCORES', 'LIMIT', 0, 256)
for i = 1, #ripe, 2 do
  local off = redis.call('HGET', BASE .. SNAPSHOT_AT .. ripe[i], 'qoffset')
  redis.call('ZADD', QUEUE, tonumber(ripe[i + 1]) - (tonumber(off or '0') or 0), ripe[i])
  redis.call('ZREM', DELAYED, ripe[i])
end
-- The head of the line: by place, then by creation order. A start's score carries its rank
-- within its place in its fraction (`create.lua`), so scores rarely tie; those that can
-- (entries moved in on the millisecond: due delayed ones, slots freed; a burst past 1024
-- starts in a millisecond) tie in the sorted set, which orders them by id, so a full batch
-- also reads every other entry of its last score, and a tie at its edge is broken rightly.
local due = {}
if count > 0 then due = redis.call('ZRANGE', QUEUE, 0, count - 1, 'WITHSCORES') end
-- The candidates as parallel lists (id, score text), in the queue's order.
local cid, cscore = {}, {}
for i = 1, #due, 2 do
  cid[#cid + 1] = due[i]
  cscore[#cscore + 1] = due[i + 1]
end
-- (A score with a fraction that is not a burst's last is one start's alone: not read;
-- past 2^41 ms, the year 2039, a fraction may be rounded, so every edge is read.)
local function may_tie(score)
  if score >= 2199023255552 then return true end
  local tie = (score - math.floor(score)) * 4096
  return tie == 0 or tie % 1024 == 1023
end
if #cid == count and count > 0 and may_tie(tonumber(cscore[#cscore])) then
  local edge = due[#due]
  local seen = {}
  for _, id in ipairs(cid) do seen[id] = true end
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', QUEUE, edge, edge)) do
    if not seen[id] then cid[#cid + 1] = id; cscore[#cscore + 1] = edge end
  end
end
local csnap, ccur = {}, {}
local tied = false
for j = 1, #cid do
  csnap[j] = BASE .. SNAPSHOT_AT .. cid[j]
  ccur[j] = redis.call('HMGET', csnap[j], 'state', 'capability', 'conc_limit', 'order',
    'last_seq', 'attempt', 'timeout_ms', 'flow')
  if j > 1 and cscore[j] == cscore[j - 1] then tied = true end
end
-- The queue gives them by score, and entries of one score by id: only a tie is put in
-- the order of creation (scores and orders read as numbers only then).
if tied then
  local at = {}
  for j = 1, #cid do
    at[j] = {cid[j], tonumber(cscore[j]), tonumber(ccur[j][4] or '0') or 0, csnap[j], ccur[j],
      cscore[j]}
  end
  table.sort(at, function(a, b)
    if a[2] ~= b[2] then return a[2] < b[2] end
    return a[3] < b[3]
  end)
  for j = 1, #at do cid[j], csnap[j], ccur[j], cscore[j] = at[j][1], at[j][4], at[j][5], at[j][6] end
end
-- Each candidate looked at leaves the queue; each one started is claimed. The index and
-- set updates of the whole batch are one command each (a batch is one atomic step).
-- (made with room for four starts: a table grown one item at a time is copied as it grows)
local out = {false, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil,
  nil, nil, nil, nil}
local ids, inputs, looked = {}, {}, 0
for j = 1, #cid do
  if #ids >= count then break end
  local id, snap, cur = cid[j], csnap[j], ccur[j]
  looked = j
  local go = cur[1] == 'queued'
  -- Its flow control (`majordomus.flow`), read only for an execution that has some.
  local fl = go and cur[8] and redis.call('HMGET', snap, 'key_limit', 'conc_key', 'rate_t',
    'rate_tau', 'rate_key', 'rate_due')
  -- Its rate limit first: over it, it is given its turn at once and waits for it as a
  -- delayed start does (`rate_held`); within it, the turn is taken below if it starts.
  local rate_bucket, rate_next = nil, nil
  if fl and fl[3] then
    local due = fl[6] and tonumber(fl[6])
    if not due then
      rate_bucket = BASE .. RATE_AT .. cur[2]
      if fl[5] then rate_bucket = rate_bucket .. KEYED_AT .. fl[5] end
      local tat = math.max(tonumber(redis.call('GET', rate_bucket) or '0') or 0, now)
      -- Over the limit when its turn is a whole millisecond or more ahead (less the burst's
      -- tolerance): Redis's clock is read in ms, so a millisecond's worth of starts (one
      -- every interval) may start within one, as a limit faster than 1,000/s needs.
      if tat - now >= tonumber(fl[4]) + 1 then
        due = math.ceil(tat - tonumber(fl[4]))
        rate_keep(rate_bucket, tat + tonumber(fl[3]))
        rate_held(id, snap, cur, due)
        rate_bucket = nil
      else
        rate_next = tat + tonumber(fl[3])
      end
    end
    if due and due > now then
      redis.call('ZADD', DELAYED, string.format('%d', due), id)
      go = false
    end
  end
  -- Then its key's limit: over it, it waits in the key's list by its place; within it, it
  -- holds (or keeps) a slot of its key, then meets its capability's.
  if go and fl and fl[1] then
    go = key_admit(BASE, cur[2], fl[2], tonumber(fl[1]), id, now, cscore[j])
  end
  if go and cur[3] then
    local limit = tonumber(cur[3]) or 0
    if limit > 0 then
      local slots = BASE .. SLOTS_AT .. cur[2]
      redis.call('ZREMRANGEBYSCORE', slots, '-inf', now_s)
      if not redis.call('ZSCORE', slots, id) and redis.call('ZCARD', slots) >= limit then
        redis.call('ZADD', slots .. WAITING_AT, cur[4], id)  -- first come, first served
        go = false
      else
        redis.call('ZADD', slots, string.format('%d', now + SLOT_MS), id)
      end
    end
  end
  if go and rate_next then rate_keep(rate_bucket, rate_next) end
  if go and fl and fl[6] then redis.call('HDEL', snap, 'rate_due') end
  if go then
    local seq = tonumber(cur[5]) + 1
    local sq = string.format('%d', seq)
    local env = envelope(id, sq, ts, 'execution.started', '')
    redis.call('XADD', snap .. EVENTS_AT, sq .. '-0', 'e', env)
    redis.call('XADD', FEED, 'MAXLEN', '~', FEED_MAX, '*', 'x', id, 's', sq, 'e', env)
    redis.call('HSET', snap, 'state', 'running', 'started_at', ts, 'started_ms', now_s,
      'worker', worker, 'attempt', string.format('%d', (tonumber(cur[6]) or 0) + 1),
      'last_seq', sq)
    ids[#ids + 1] = id
    inputs[#inputs + 1] = snap .. INPUT_AT
    out[#out + 1] = id
    out[#out + 1] = cur[2]
    out[#out + 1] = false  -- its worker-only input, read below
    out[#out + 1] = seq
    out[#out + 1] = cur[7]  -- its start's own timeout (ms), or false
  end
end
if looked > 0 then redis.call('ZREM', QUEUE, unpack(cid, 1, looked)) end
if #ids > 0 then
  -- The roll-up: each start by its wait, one count per distinct field of the batch.
  if ROLLUP_ON then
    local due_at = redis.call('ZMSCORE', QUEUED, unpack(ids))
    local tally, fields = {}, {}
    for j = 1, #ids do
      if due_at[j] then
        local f = rollup_field('w', math.max(0, now - tonumber(due_at[j])), out[5 * j - 2])
        if not tally[f] then fields[#fields + 1] = f; tally[f] = 0 end
        tally[f] = tally[f] + 1
      end
    end
    for _, f in ipairs(fields) do rollup_add(now, f, tally[f]) end
  end
  redis.call('ZREM', QUEUED, unpack(ids))
  local scored = {}
  for j = 1, #ids do scored[2 * j - 1] = now_s; scored[2 * j] = ids[j] end
  redis.call('ZADD', RUNNING, unpack(scored))
  redis.call('SADD', mine, unpack(ids))
  local got = redis.call('MGET', unpack(inputs))
  for j = 1, #ids do out[5 * j - 1] = got[j] end
  redis.call('SET', last, token .. ' ' .. table.concat(ids, ' '), 'PX', TAKE_TTL)
end
out[1] = next_due()
-- Nothing left to take: the wake-ups waiting on the list are for work already taken.
if out[1] ~= now then redis.call('DEL', WAKEUP) end
return out
