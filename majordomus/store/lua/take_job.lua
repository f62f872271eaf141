-- arq's check-and-mark of one job before a worker runs it (its `Worker.start_jobs`), in one
-- round trip instead of four (WATCH, EXISTS, ZSCORE, MULTI/PSETEX/EXEC): the job is not in
-- progress on any worker, is still queued and is due; then it is marked in progress.
-- Answers its queue score, or nil when another worker has it or it is gone or deferred.
--
-- KEYS: arq's in-progress key of the job, arq's queue
-- ARGV: job id, now (epoch ms, the worker's clock as arq uses it), in-progress timeout ms
if redis.call('EXISTS', KEYS[1]) == 1 then return false end
local score = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not score or tonumber(score) > tonumber(ARGV[2]) then return false end
redis.call('SET', KEYS[1], '1', 'PX', ARGV[3])
return score
