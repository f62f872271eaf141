-- Record an execution started in an episode: the newest ids (at most the bound) and a count.
--
-- KEYS: record
-- ARGV: execution id, how many ids to keep
-- Returns: 1 when recorded, 0 when there is no such open or detached episode.
local rec = KEYS[1]
if redis.call('EXISTS', rec) == 0 then return 0 end
local ids = cjson.decode(redis.call('HGET', rec, 'executions') or '[]')
table.insert(ids, ARGV[1])
while #ids > tonumber(ARGV[2]) do table.remove(ids, 1) end
redis.call('HSET', rec, 'executions', cjson.encode(ids))
redis.call('HINCRBY', rec, 'execution_count', 1)
return 1
