-- Create one execution and enqueue it, atomically: the snapshot, `execution.created` (1)
-- and `execution.queued` (2), the indexes, the worker-only input, its queue entry, and the
-- wake-up signal idle workers wait on. Nothing exists if any part does not. The snapshot
-- is the job: a worker takes the execution by its id (`take.lua`), nothing else is kept.
-- The same call sent twice creates one execution and answers both alike.
--
-- Due now, it enters the ready queue at its place (`qscore`: now, less its priority's head
-- start, `majordomus.priorities`), with a fraction of a millisecond more that orders the
-- entries of one place as they were created (see `tie`); due later, the delayed set, scored
-- by its due time, from which the take moves it to that place when it is due. An
-- idempotency key held by an execution that still exists answers that execution instead,
-- whoever asks: the key and the execution are written in this one step, so two racing
-- starts with one key create one.
-- A retry (`retry_of`) names the attempt it retries, which is told `retried_as` here too.
--
-- Constants (`StoreBase.partition_script`: one text per partition) used here: FEED, ALL
--       (idx:all), QUEUED (idx:queued), QUEUE, COUNTER (the last place in the order of
--       creation given here),
--       DELAYED, WAKEUP (the wake-up list), BASE (the partition's key base), FEED_MAX,
--       RETAIN_MS (the worker-only input's and the idempotency key's time to live), WAKE
--       (the wake channel), SEARCHED (the search indexes of each execution).
-- KEYS: snapshot, events, secret input; then, with the options that name them, the
--       idempotency key, the retried attempt's snapshot, the window of its key (collapse)
--       and the search indexes (keys of the partition's slot, as a Redis Cluster requires)
-- ARGV: id, timestamp, now_ms, capability, title, input JSON (redacted), cancellable,
--       actor, secret JSON or '', created data JSON, priority, its head start ms,
--       attempts before, the call's token (`next_token`: the same call sent again is
--       known by it), the rank of its head start among the levels'
--       (`majordomus.priorities.tie_rank`); then the options a start has, as (name, value)
--       pairs: episode, conc_limit (max_concurrency), due_ms and due_at (due later),
--       schedule, timeout_ms (a bound shorter than its capability's timeout, for the take
--       to hand its worker), retry_of, retried ('1': the retried attempt's snapshot is a key, told
--       `retried_as`), idempotency (the key's text) and fingerprint, part and parts (the
--       partition's index and the partitions, when there are several), indexed (the
--       search indexes its searchable input members name, `majordomus.search`, as a JSON
--       list kept in SEARCHED for `prune`: the keys after the others, each added to). A plain start has
--       none: every argument costs Redis about as much as a small command, as it is read,
--       then made a Lua value.
-- A rate limit's interval and tolerance (rate_t, rate_tau) and bucket key (rate_key) are
-- kept for the take, which checks the limit (`majordomus.flow.RateLimit`).
-- A start of a capability limited per key (key_limit and conc_key: `majordomus.flow`) due
-- now is admitted into the queue only while its key has a slot free (it holds one from
-- here) and none of the key's waits; else it waits in the key's own list (`key_admit`).
-- A start of a capability declaring `collapse` (collapse: 'throttle' or 'debounce', and
-- window_ms: `majordomus.flow`) whose key's window is open is collapsed into the window's
-- execution instead (after the idempotency key's check: a held key answers first), which
-- counts it in `collapsed`; a debounced one waiting for the due time its window set is given
-- this start's input (and search indexes) and pushed to this start's due time. Else it
-- opens the window: a throttle's the window long, a debounce's while its execution waits.
-- Answers {ahead}, or {-2, held id, its fingerprint} for a held idempotency key, or {-3,
-- carrying id, its collapsed count, its due_at when its input was replaced or ''}.
--@ENVELOPE@
--@KEYSLOTS@
local snap, stream = KEYS[1], KEYS[2]
-- The options a start has (most have none), and the keys that come with three of them.
local opt = {}
for i = 16, #ARGV, 2 do opt[ARGV[i]] = ARGV[i + 1] end
local idem_key, retried_key = nil, nil
if opt.idempotency then idem_key = KEYS[4] end
if opt.retried then retried_key = KEYS[idem_key and 5 or 4] end
local first_index = 4 + (idem_key and 1 or 0) + (retried_key and 1 or 0)
local collapse_key = nil
if opt.collapse then collapse_key = KEYS[first_index]; first_index = first_index + 1 end
local id, ts = ARGV[1], ARGV[2]
local was = redis.call('HMGET', snap, 'created_by', 'ahead')
if was[2] then
  -- This very call sent again (its answer was lost and the client retried; its token says
  -- so): the same answer. Any other start that drew this id draws another (`IdTaken`).
  if was[1] == ARGV[14] then return {tonumber(was[2])} end
  return {-1}
end
if idem_key then
  local held = redis.call('GET', idem_key)
  if held then
    local hid, hfp = string.match(held, '^(%S+) (%S*)$')
    if hid and redis.call('EXISTS', BASE .. SNAPSHOT_AT .. hid) == 1 then
      return {-2, hid, hfp}
    end
  end
end
if collapse_key then
  local window = redis.call('GET', collapse_key)
  local cid, cdue = nil, nil
  if window then cid, cdue = string.match(window, '^(%S+) (%S*)$') end
  local csnap = cid and BASE .. SNAPSHOT_AT .. cid
  local carried, due_at = false, ''
  if csnap and opt.collapse == 'throttle' then
    carried = redis.call('EXISTS', csnap) == 1
  elseif csnap and opt.due_ms and redis.call('ZSCORE', DELAYED, cid) == cdue then
    -- Still waiting for the due time its window set (not come due, nor moved since): it
    -- takes this start's input, and waits until this start's due time.
    local c = redis.call('TIME')
    local cnow = tonumber(c[1]) * 1000 + math.floor(tonumber(c[2]) / 1000)
    carried = tonumber(cdue) > cnow
  end
  if carried and opt.collapse == 'debounce' then
    local due, keep_ms = cdue, tonumber(opt.window_ms)
    if tonumber(opt.due_ms) > tonumber(cdue) then
      due = opt.due_ms
      redis.call('HSET', csnap, 'input', ARGV[6], 'due_ms', due, 'due_at', opt.due_at)
      redis.call('ZADD', DELAYED, due, cid)
      redis.call('ZADD', QUEUED, due, cid)
      keep_ms = keep_ms + tonumber(due) - tonumber(ARGV[3])
      redis.call('SET', collapse_key, cid .. ' ' .. due, 'PX', string.format('%d', keep_ms))
      due_at = opt.due_at
    else  -- a start whose clock runs behind the window's: its input, not its due time
      redis.call('HSET', csnap, 'input', ARGV[6])
      due_at = redis.call('HGET', csnap, 'due_at')
    end
    local input_key = csnap .. INPUT_AT
    local keep = string.format('%d', tonumber(RETAIN_MS) + tonumber(due) - tonumber(ARGV[3]))
    if ARGV[9] ~= '' then redis.call('SET', input_key, ARGV[9], 'PX', keep)
    else redis.call('DEL', input_key) end
    -- Its search indexes are its new input's.
    local indexed = redis.call('HGET', SEARCHED, cid)
    for _, index in ipairs(indexed and cjson.decode(indexed) or {}) do
      redis.call('ZREM', index, cid)
    end
    if opt.indexed then
      local order = redis.call('HGET', csnap, 'order')
      for i = first_index, #KEYS do redis.call('ZADD', KEYS[i], order, cid) end
      redis.call('HSET', SEARCHED, cid, opt.indexed)
    elseif indexed then
      redis.call('HDEL', SEARCHED, cid)
    end
  end
  if carried then
    if idem_key then
      redis.call('SET', idem_key, cid .. ' ' .. opt.fingerprint, 'PX', RETAIN_MS)
    end
    return {-3, cid, redis.call('HINCRBY', csnap, 'collapsed', 1), due_at}
  end
end
-- Due now unless a due time is given (the caller gives one only when it is later). Text
-- becomes a number only where arithmetic needs one: Lua reads a number with strtod and
-- writes one with sprintf, and both cost as much as a small command here.
local ready = not opt.due_ms
local due = not ready and tonumber(opt.due_ms)
-- The server's millisecond, not the caller's: the order of creation and a ready entry's
-- place follow the order the starts reached Redis in, whichever process (and clock) sent
-- each (one running behind would otherwise have its starts tie, `tie` below).
local t = redis.call('TIME')
local snow = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local at = snow
if not ready then at = due end
local qscore = at
if ARGV[12] ~= '0' then qscore = at - tonumber(ARGV[12]) end
-- Its place in the order of creation: epoch ms times 1024, kept rising within the
-- partition (so newest-first is exact here) and congruent to the partition's index modulo
-- the partitions (so no two partitions give one place): the lists of every partition
-- merge into one, and a place is a cursor. Written with %d (a 64-bit integer): Lua's own
-- number text would round it to 14 digits. With one partition the next in a burst is the
-- counter's INCR (one command, which answers a number: no text to parse); the first start
-- of a millisecond sets it to that millisecond's first place.
local order_n, order
if opt.parts then
  local part, parts = tonumber(opt.part), tonumber(opt.parts)
  order_n = math.max(snow * 1024, (tonumber(redis.call('GET', COUNTER)) or 0) + 1)
  order_n = order_n + (part - order_n % parts) % parts
  order = string.format('%d', order_n)
  redis.call('SET', COUNTER, order)
else
  order_n = redis.call('INCR', COUNTER)
  if order_n < snow * 1024 then
    order_n = snow * 1024
    order = string.format('%d', order_n)
    redis.call('SET', COUNTER, order)
  else
    order = string.format('%d', order_n)
  end
end
-- The tie: the entries of one place, in the order they were created. Entries of one
-- place created in one millisecond are of one level (its head start fixes the ms) and
-- follow their order's rise within the ms (`sub`); created in different ones, they are of
-- different levels, the earlier created the one with the lower head start (`ARGV[15]`, its
-- rank). So the place plus (rank * 1024 + sub) / 4096 orders them as created, and a take
-- reading the queue's head in score order needs no snapshot to break a tie (take.lua still
-- breaks one by the order, for the entries that can share a score: those moved back in,
-- scored on the millisecond, and a sub past 1023). Exact in a double while a place is
-- below 2^41 ms (the year 2039; later, rounding can only make ties, never swap two).
-- A fraction of 4096ths has exactly 12 decimals (1/4096 = 0.000244140625): written as
-- integers, which is the text %.12f would give, at a fraction of its cost.
local tie = math.min(order_n - snow * 1024, 1023)
if ARGV[15] ~= '0' then tie = tie + tonumber(ARGV[15]) * 1024 end
local place
if tie > 0 then
  place = string.format('%d.%012d', qscore, tie * 244140625)
else
  place = string.format('%d', qscore)
end
-- Admitted: into the queue (not so only for a keyed start whose key has none free, or has
-- some waiting already: it waits behind them).
local admitted = true
if ready and opt.key_limit then
  if redis.call('EXISTS', key_slots_of(BASE, ARGV[4], opt.conc_key) .. WAITING_AT) == 1 then
    admitted = false
    redis.call('ZADD', key_slots_of(BASE, ARGV[4], opt.conc_key) .. WAITING_AT, place, id)
    redis.call('SADD', BASE .. SLOTS_AT .. ARGV[4] .. KEYSET_AT, opt.conc_key)
  else
    admitted = key_admit(BASE, ARGV[4], opt.conc_key, tonumber(opt.key_limit), id, snow, place)
  end
end
-- Ahead: what the take serves first, every entry at or before its score (one on the same
-- score was created before it, so comes first); for a delayed one, as things stand now.
local ahead
if ready then
  ahead = redis.call('ZCOUNT', QUEUE, '-inf', place)
  if not admitted then  -- and its key's waiting before it
    ahead = ahead + redis.call('ZCOUNT', key_slots_of(BASE, ARGV[4], opt.conc_key) .. WAITING_AT,
      '-inf', '(' .. place)
  end
else
  ahead = redis.call('ZCOUNT', QUEUE, '-inf', qscore)
  ahead = ahead + redis.call('ZCOUNT', DELAYED, '-inf', due)
end
-- Numbers reach Redis as the strings they came as: Redis formats a Lua number argument
-- with snprintf('%.17g'), which costs more than most of the commands here.
-- The snapshot is a small hash (a listpack) in which Redis finds a field by reading the
-- fields before it: those every take and append reads come first. Steps and diagnostics
-- are written by the first append that has one (append.lua and the readers take an
-- absent one as empty).
local ahead_s = string.format('%d', ahead)
local created = {'state', 'queued', 'last_seq', '2', 'capability', ARGV[4], 'order', order,
  'attempt', ARGV[13], 'ahead', ahead_s, 'created_by', ARGV[14], 'created_ms', ARGV[3],
  'id', id, 'title', ARGV[5], 'input', ARGV[6], 'cancellable', ARGV[7], 'actor', ARGV[8],
  'created_at', ts, 'priority', ARGV[11], 'qoffset', ARGV[12]}
local n = #created
local function field(name, value)
  created[n + 1] = name; created[n + 2] = value; n = n + 2
end
if opt.episode then field('episode', opt.episode) end
if opt.conc_limit then field('conc_limit', opt.conc_limit) end
-- Its flow control, marked for the take and the end (which read the rest only then): `k`
-- a limit per key, `r` a rate limit.
if opt.key_limit or opt.rate_t then
  field('flow', (opt.key_limit and 'k' or '') .. (opt.rate_t and 'r' or ''))
end
if opt.key_limit then field('key_limit', opt.key_limit); field('conc_key', opt.conc_key) end
if opt.rate_t then field('rate_t', opt.rate_t); field('rate_tau', opt.rate_tau) end
if opt.rate_key then field('rate_key', opt.rate_key) end
if not ready then field('due_ms', opt.due_ms); field('due_at', opt.due_at) end
if opt.schedule then field('schedule', opt.schedule) end
if opt.timeout_ms then field('timeout_ms', opt.timeout_ms) end
if opt.retry_of then field('retry_of', opt.retry_of) end
if idem_key then field('idempotency_key', opt.idempotency) end
redis.call('HSET', snap, unpack(created))
local e1 = envelope(id, '1', ts, 'execution.created', ARGV[10])
local queued = '{"ahead":' .. ahead_s
if not ready then queued = queued .. ',"due_at":"' .. opt.due_at .. '"' end
local e2 = envelope(id, '2', ts, 'execution.queued', queued .. '}')
redis.call('XADD', stream, '1-0', 'e', e1)
redis.call('XADD', stream, '2-0', 'e', e2)
redis.call('XADD', FEED, 'MAXLEN', '~', FEED_MAX, '*', 'x', id, 's', 1, 'e', e1)
redis.call('XADD', FEED, 'MAXLEN', '~', FEED_MAX, '*', 'x', id, 's', 2, 'e', e2)
redis.call('ZADD', ALL, order, id)
if opt.indexed then
  -- The search indexes (of this partition's slot), scored as idx:all is.
  for i = first_index, #KEYS do redis.call('ZADD', KEYS[i], order, id) end
  redis.call('HSET', SEARCHED, id, opt.indexed)
end
-- idx:queued is scored by when it is due, so a wait is counted from then.
local at_s = ready and ARGV[3] or opt.due_ms
redis.call('ZADD', QUEUED, at_s, id)
-- The worker-only input and the idempotency key are kept the retention past when it is
-- due, so a start due later than the retention still runs with its input, and its key
-- still answers it.
local keep = RETAIN_MS
if not ready then keep = string.format('%d', tonumber(RETAIN_MS) + (at - tonumber(ARGV[3]))) end
if ARGV[9] ~= '' then redis.call('SET', KEYS[3], ARGV[9], 'PX', keep) end
if not admitted then
  -- Waiting for its key (in the key's list): nothing to take, no worker to wake.
elseif ready then
  redis.call('ZADD', QUEUE, place, id)
else
  redis.call('ZADD', DELAYED, opt.due_ms, id)
end
-- An idle worker waiting on the wake-up list takes it now (its take is queued behind its
-- blocking pop), or, due later, learns when to wake; kept short (back to 16 once past 32,
-- so a burst with every worker busy trims it once in 16 starts, not at each): a wake-up
-- nobody waits for costs one empty take, and the take that leaves the queue empty drops
-- them all.
if admitted and redis.call('LPUSH', WAKEUP, id) > 32 then redis.call('LTRIM', WAKEUP, 0, 15) end
if idem_key then redis.call('SET', idem_key, id .. ' ' .. opt.fingerprint, 'PX', keep) end
if collapse_key then
  -- Its key's window: "<id> <due ms>" (a debounced one's due time, by which a later start
  -- knows it has not come due since), kept a throttle's window from now, or a debounced
  -- one's past its due time.
  local window_ms = tonumber(opt.window_ms)
  if opt.collapse == 'debounce' and not ready then
    window_ms = window_ms + (at - tonumber(ARGV[3]))
  end
  redis.call('SET', collapse_key, id .. ' ' .. (opt.due_ms or ''), 'PX',
    string.format('%d', window_ms))
end
if retried_key and redis.call('EXISTS', retried_key) == 1 then
  redis.call('HSET', retried_key, 'retried_as', id)
end
if admitted then redis.call('PUBLISH', WAKE, id) end
return {ahead}
