"""Everything that speaks Redis, and nothing else does.

- `connect`: the one client factory (and the process commands' start-up check), over
  `policy`, `urls`, `connection`, `cluster` and `sentinel`; `redis_internals`: the one
  fence around redis-py's private names (the servers it talks to are started elsewhere:
  `majordomus.local`);
- `keys`: every key name; `scripts`: the one loader of `lua/*.lua`;
- `executions`: snapshots, event streams, indexes, retention, and `Store`, which gathers the
  per-concept classes: `queue` (arq's job format, taking a job, concurrency slots),
  `workers` (presence and leases), `feed` (the global feed), `signals` (wake-up and cancel),
  `rollup` (the per-minute counts the charts read);
- `episodes`: the episodes' records and leases; `failures`: what a surface catches.

Above this package nothing names a Redis command (`tests/test_layout.py` checks it).
"""
