"""Every Redis key majordomus writes, built in this one module, arq's included.

Every key starts with the prefix (`MAJORDOMUS_KEY_PREFIX`), so deployments with different
prefixes share a database without sharing a key. Of arq's keys only the worker's health
record remains (`<prefix>:queue:health-check`, what `arq --check` reads): an execution's
snapshot is its job, `take.lua` takes and starts it in one step, majordomus keeps no
result beside the snapshot and cancels through its own `cancelling`.

**Partitions.** The executions are split into `MAJORDOMUS_PARTITIONS` partitions (1 by
default). Everything a script touches in one step lives in one partition and carries that
partition's hash tag, so on a Redis Cluster each script's keys are in one slot and the
partitions spread over the shards: an execution's snapshot, stream, worker-only input and
task record; its partition's ready queue, delayed set, indexes (all, queued, running,
finished) and live feed; each worker's lease, running set and last take, once per
partition; each capped capability's slots and waiting list; the idempotency keys and the
windows of collapsed starts. The tags are chosen so that partition n of P hashes into the
n-th of P equal slot ranges (`partition_tag`), which is how `redis-cli --cluster create`
deals slots out: P partitions on P shards put one on each. An execution's partition is its
id's random suffix modulo P (`majordomus.ids`), so finding its keys needs no lookup; the
number of partitions is fixed for a deployment's life (changing it would move every id's
keys).

Keys outside the partitions are touched by single-key commands only, or by scripts of
their own concept that stay in one slot: the workers' set and presence, the sweeper lock,
the channels, the episodes (one tag for all of them, `{<prefix>:ep}`) and the schedules
(`{<prefix>:sched}`).

**The roll-up.** Each partition also keeps one hash a minute counting its executions'
starts and ends, with histograms of their waits and durations (`Partition.rollup`), under
its own tag: the scripts that start and end an execution count it in the same step, and a
reader sums the partitions' hashes of a minute.
"""

from __future__ import annotations

import binascii
import itertools
import zlib

SLOTS = 16384
"""Redis Cluster's hash slots."""

# -- the names of a partition's keys the scripts build as they go ---------------------------
# A script is given its partition's base (`Partition.base`) and finds an execution's
# snapshot, a capability's slots or a worker's set from it by these names, each given to it
# as a constant (`SCRIPT_KEY_NAMES`, `StoreBase.partition_script`): the key layout is this
# module's alone (tests/majordomus/test_stored_format.py fails on a key name a script spells
# out that is not one of these).

SNAPSHOT = "x:"
"""`<base>x:<execution id>`: an execution's snapshot hash."""
EVENTS = ":events"
"""`<snapshot>:events`: its event stream."""
SECRET_INPUT = ":input"
"""`<snapshot>:input`: its worker-only input."""
TASK = ":task"
"""`<snapshot>:task`: the MCP task it backs."""
CAPABILITY_SLOTS = "conc:"
"""`<base>conc:<capability>`: a capped capability's slots."""
WAITING = ":waiting"
"""`<slots>:waiting`: its executions waiting for a slot."""
KEYED = ":key:"
"""`<slots>:key:<key>`: the slots of one key of a capability declaring `per_key`
(`majordomus.flow`); `<slots>:key:<key>:waiting` its executions waiting for one."""
KEYS_WAITING = ":keys"
"""`<slots>:keys`: the keys of a capability that have executions waiting (a set)."""
RATE = "rate:"
"""`<base>rate:<capability>` (and `...:key:<key>` for a limit per key): a rate limit's
bucket, the time its next start is due at the limit's pace (`majordomus.flow.RateLimit`)."""
COLLAPSE = "collapse:"
"""`<base>collapse:<capability>:<key>`: the execution that carries the starts of one key of a
capability declaring `collapse` in its window (`majordomus.flow`)."""
WORKER = "worker:"
"""`<base>worker:<worker id>...`: a worker's keys in a partition."""
WORKER_RUNNING = ":running"
"""`<base>worker:<worker id>:running`: the executions it holds there."""
WAKEUP = "wakeup"
"""`<base>wakeup`: the wake-up list."""
ROLLUP = "rollup:"
"""`<base>rollup:<minute>`: a minute's roll-up."""

SCRIPT_KEY_NAMES: dict[str, str | int] = {
    "SNAPSHOT_AT": SNAPSHOT,
    "EVENTS_AT": EVENTS,
    "INPUT_AT": SECRET_INPUT,
    "SLOTS_AT": CAPABILITY_SLOTS,
    "WAITING_AT": WAITING,
    "KEYED_AT": KEYED,
    "KEYSET_AT": KEYS_WAITING,
    "RATE_AT": RATE,
    "WORKER_AT": WORKER,
    "RUNNING_AT": WORKER_RUNNING,
    "WAKEUP_AT": WAKEUP,
}
"""The names above as the scripts know them (Lua constants, `scripts.with_constants`). The
roll-up's functions (`lua/rollup.lua`, run alone by its tests and benchmark) spell
`ROLLUP` out: the test checks it against this module's."""

ROLLUP_STEPS = 4
"""Buckets per doubling in the roll-up's histograms of wait and duration (`Partition.rollup`):
a bucket spans a factor of 2^(1/4), so a percentile read from it is within 19 % (about 9 %
from the bucket's middle)."""


def slot_of(key: str) -> int:
    """The Redis Cluster hash slot of `key` (CRC16/XMODEM of its hash tag, or of the key)."""
    raw = key.encode()
    start = raw.find(b"{")
    if start >= 0:
        end = raw.find(b"}", start + 1)
        if end > start + 1:
            raw = raw[start + 1 : end]
    return binascii.crc_hqx(raw, 0) % SLOTS


def partition_tag(prefix: str, index: int, count: int) -> str:
    """The hash tag of partition `index` of `count`: the first `{<prefix>/<index>/<k>}`
    whose slot lies in the `index`-th of `count` equal slot ranges."""
    for k in itertools.count():
        tag = f"{prefix}/{index}/{k}"
        if slot_of("{" + tag + "}") * count // SLOTS == index:
            return "{" + tag + "}"
    raise AssertionError("unreachable")


class Partition:
    """The keys of one partition, every one of them in the same slot: each is its `base`
    (`<prefix>:{<tag>}:`) and a name, so a script given the base finds the keys it did
    not get as it goes (an execution's snapshot, a capability's slots, a worker's set)."""

    def __init__(self, prefix: str, index: int, count: int) -> None:
        self.index = index
        self.tag = partition_tag(prefix, index, count)
        self.base = base = f"{prefix}:{self.tag}:"
        # The ready queue: what can run now, scored by its place in line (when it became
        # ready, less its priority's head start, `majordomus.priorities`).
        self.queue = base + "queue"
        # This partition's epoch: a random id set once, by the first process that finds
        # none (`majordomus.epochs`): found gone or changed, Redis lost this partition's data.
        self.epoch = base + "epoch"
        # Executions due later, scored by when (epoch ms); the take moves each into the ready
        # queue when it is due, so waiting costs no worker and no traffic.
        self.delayed = base + "queue:delayed"
        # Every execution, by its place in the order of creation (`create.lua`: epoch ms
        # times 1024, rising within the partition and unique across them), so the
        # partitions' lists merge into one.
        self.all = base + "idx:all"
        self.created_counter = base + "idx:all:counter"
        self.queued = base + "idx:queued"
        self.running = base + "idx:running"
        self.finished = base + "idx:finished"
        self.feed = base + "feed"

    def snapshot(self, execution_id: str) -> str:
        return f"{self.base}{SNAPSHOT}{execution_id}"

    def worker_running(self, worker_id: str) -> str:
        """The executions of this partition a worker holds (running or cancelling): added
        by the claim and removed by the terminal event, in `append.lua`, so finding a dead
        worker's executions reads these sets, never every execution."""
        return f"{self.base}{WORKER}{worker_id}{WORKER_RUNNING}"

    @property
    def wakeup(self) -> str:
        """A list each start due now (and each slot freed) pushes onto: a worker with room
        waits on it with a blocking pop that its take follows in the same write, so the start
        is taken as soon as it is made (`QueueStore.take_blocking`). Kept short (`WAKEUP_MAX`),
        emptied by a take that leaves the queue empty."""
        return f"{self.base}{WAKEUP}"

    def worker_woken(self, worker_id: str) -> str:
        """Where a worker's blocking pop moves the wake-up it got, for its take to consume."""
        return f"{self.base}{WORKER}{worker_id}:woken"

    def worker_stopping(self, worker_id: str) -> str:
        """Set by a stopping worker: its blocking take, if one is waiting, takes nothing."""
        return f"{self.base}{WORKER}{worker_id}:stopping"

    def worker_take(self, worker_id: str) -> str:
        """A worker's last take of this partition (its token and the ids it started), so
        that the take sent again after a lost answer answers the same executions."""
        return f"{self.base}{WORKER}{worker_id}:take"

    def lease(self, worker_id: str) -> str:
        """A worker's lease, as this partition's scripts read it (one per partition, all
        renewed by each beat)."""
        return f"{self.base}lease:{worker_id}"

    def concurrency(self, capability: str) -> str:
        return f"{self.base}{CAPABILITY_SLOTS}{capability}"

    def waiting(self, capability: str) -> str:
        """Executions held back by the capability's `max_concurrency`, scored by their
        place: out of the queue, so waiting costs no worker and no traffic; the terminal
        event of a slot holder moves the oldest back into the queue."""
        return f"{self.base}{CAPABILITY_SLOTS}{capability}{WAITING}"

    def key_slots(self, capability: str, key: str) -> str:
        """The slots of one key of a capability declaring `per_key` (`majordomus.flow`),
        scored by when each runs out: held by its running executions and by its admitted
        queued ones."""
        return f"{self.base}{CAPABILITY_SLOTS}{capability}{KEYED}{key}"

    def key_waiting(self, capability: str, key: str) -> str:
        """The executions of one key waiting for one of its slots, scored by their place in
        line: out of the queue until a slot of the key is free."""
        return f"{self.base}{CAPABILITY_SLOTS}{capability}{KEYED}{key}{WAITING}"

    def keys_waiting(self, capability: str) -> str:
        """The keys of a capability that have executions waiting (a set): what the queue's
        upkeep and its statistics go through."""
        return f"{self.base}{CAPABILITY_SLOTS}{capability}{KEYS_WAITING}"

    def rate_bucket(self, capability: str, key: str | None = None) -> str:
        """A rate limit's bucket (`majordomus.flow.RateLimit`): one of the capability, or one
        per key; kept by the take, expiring once a quiet spell has filled it."""
        keyed = f"{KEYED}{key}" if key is not None else ""
        return f"{self.base}{RATE}{capability}{keyed}"

    def search(self, capability: str, member: str, value: str) -> str:
        """The executions of a capability whose searchable input member has this value
        (`majordomus.search.value_text`), scored by their place in the order of creation like
        `idx:all`: added by `create.lua`, removed with the execution by `prune`."""
        return f"{self.base}idx:in:{capability}:{member}:{value}"

    @property
    def searched(self) -> str:
        """The search indexes each execution of this partition is in (a hash: id -> JSON
        list of their names), written with them by `create.lua` and read by `prune`, which
        outlives the snapshot (it expires the retention after the execution ends)."""
        return f"{self.base}idx:in"

    def idempotency(self, key: str) -> str:
        """An idempotency key's holder ("<execution id> <fingerprint>"), kept the retention."""
        return f"{self.base}idem:{key}"

    def collapse(self, capability: str, key: str) -> str:
        """The window of one key of a capability declaring `collapse` (`majordomus.flow`):
        the execution that carries its starts ("<execution id> <due ms>", a debounced one's
        due time as its window set it), kept as long as the window is open."""
        return f"{self.base}{COLLAPSE}{capability}:{key}"

    def rollup(self, minute: int) -> str:
        """One minute's roll-up of this partition's executions (`minute`: epoch ms // 60,000),
        a hash of counts written by take.lua and append.lua in the step that moves what they
        count, read by `store/rollup.py`: fields `<kind>:<bucket>:<capability>`, kind `w` a
        start by its wait, `s`, `f` or `c` an end (succeeded, failed, cancelled) by its
        duration, bucket `ROLLUP_STEPS` per doubling of milliseconds (`-`: an end that never
        started). Expires `rollup_keep_seconds` (a setting, 25 h by default) after its
        minute ends, which bounds the roll-up's memory: at most 1,500 hashes a partition by
        default, each as many fields as its minute saw capabilities and buckets."""
        return f"{self.base}{ROLLUP}{minute}"


class Keys:
    def __init__(self, prefix: str = "md", partitions: int = 1) -> None:
        self.prefix = prefix
        self.partition_count = partitions
        self.partitions = tuple(Partition(prefix, i, partitions) for i in range(partitions))
        # arq's worker health record (what `arq --check` reads), named as arq names it: its
        # queue name is `<prefix>:queue`, which majordomus keeps per partition.
        self.queue_name = f"{prefix}:queue"
        self.health_check = f"{prefix}:queue:health-check"
        self.workers = f"{prefix}:workers"
        self.wake_channel = f"{prefix}:wake"
        self.cancel_channel = f"{prefix}:cancel"
        # The one sweeper at a time, across every worker and API process.
        self.sweeper_lock = f"{prefix}:sweeper"
        # The capabilities' declarations as the workers publish them (id -> JSON), read by
        # a producer that starts a capability it does not import (`store/declarations.py`).
        self.declarations = f"{prefix}:declarations"
        # Open and detached episodes by external id, scored by when the reaper may close
        # each (epoch ms); closed records by their key, scored by when they closed. Every
        # episode key shares one tag, so the episodes' scripts stay in one slot.
        self.episode_tag = "{" + prefix + ":ep}"
        self.episodes = f"{prefix}:episodes:{self.episode_tag}"
        self.episodes_closed = f"{prefix}:episodes:{self.episode_tag}:closed"

    # -- partitions -----------------------------------------------------------------------

    def partition_of(self, execution_id: str) -> Partition:
        """The partition an execution lives in: its id's random suffix modulo the count."""
        if self.partition_count == 1:
            return self.partitions[0]
        return self.partitions[int(execution_id[-8:], 16) % self.partition_count]

    def partition_for(self, name: str) -> Partition:
        """The partition a name (a capped capability, an idempotency key) is pinned to."""
        return self.partitions[zlib.crc32(name.encode()) % self.partition_count]

    def partition_of_capability(self, capability: str) -> Partition:
        """The partition every execution of a capped capability (`max_concurrency`) lives
        in, with its slots and waiting list: the cap is kept in one step, in one slot."""
        return self.partition_for("cap:" + capability)

    def partition_of_concurrency_key(self, capability: str, key: str) -> Partition:
        """The partition every execution of one key of a capability declaring `per_key`
        lives in, with the key's slots and waiting list (`majordomus.flow`)."""
        return self.partition_for(f"conc:{capability}:{key}")

    def partition_of_collapse(self, capability: str, key: str) -> Partition:
        """The partition every execution of one key of a capability declaring `collapse`
        lives in, with its window's record (`majordomus.flow`)."""
        return self.partition_for(f"collapse:{capability}:{key}")

    def partition_of_key(self, idempotency_key: str) -> Partition:
        """The partition an idempotency key (and so the execution holding it) lives in: a
        retry's key (`retry:<id>`) its retried attempt's, any other by the key's hash."""
        retried = idempotency_key.removeprefix("retry:")
        if retried != idempotency_key and len(retried) >= 8:
            try:
                return self.partition_of(retried)
            except ValueError:
                pass
        return self.partition_for("key:" + idempotency_key)

    # -- one execution ----------------------------------------------------------------------

    def snapshot(self, execution_id: str) -> str:
        return self.partition_of(execution_id).snapshot(execution_id)

    def events(self, execution_id: str) -> str:
        return self.snapshot(execution_id) + EVENTS

    def secret_input(self, execution_id: str) -> str:
        return self.snapshot(execution_id) + SECRET_INPUT

    def execution_keys(self, execution_id: str) -> list[str]:
        return [
            self.snapshot(execution_id),
            self.events(execution_id),
            self.secret_input(execution_id),
        ]

    def task(self, execution_id: str) -> str:
        """The MCP task an execution backs: its id secret's hash, its owner and its tool. It
        shares the execution's partition tag, so a task and its execution are read in one
        round trip on one node, and on a Redis Cluster in one slot."""
        return self.snapshot(execution_id) + TASK

    # -- workers ------------------------------------------------------------------------------

    def worker(self, worker_id: str) -> str:
        """A worker's presence (a hash: host, pid, last beat...)."""
        return f"{self.prefix}:worker:{worker_id}"

    # -- episodes (`majordomus.store.episodes`) -------------------------------------------

    def episode(self, external_id: str) -> str:
        return f"{self.prefix}:ep:{self.episode_tag}:{external_id}"

    def episode_lease(self, external_id: str) -> str:
        return f"{self.episode(external_id)}:lease"

    def episode_closed(self, external_id: str, closed_ms: int) -> str:
        """The record an episode becomes when it closes, kept for the retention time."""
        return f"{self.episode(external_id)}:closed:{closed_ms}"

    # -- schedules (`majordomus.store.schedules`) -------------------------------------------

    @property
    def schedule_tag(self) -> str:
        return "{" + self.prefix + ":sched}"

    @property
    def schedules(self) -> str:
        """Every schedule's id, scored by when it was first stored (epoch ms)."""
        return f"{self.prefix}:schedules:{self.schedule_tag}"

    @property
    def schedules_version(self) -> str:
        """A counter every change of a schedule (not its ticks) increments: a ticker reads it
        at each wake and reloads the schedules when it moved."""
        return f"{self.prefix}:schedules:{self.schedule_tag}:version"

    def schedule(self, schedule_id: str) -> str:
        """One schedule: its definition, origin, pause and last tick (`store/schedules.py`)."""
        return f"{self.prefix}:sched:{self.schedule_tag}:{schedule_id}"

    # -- MCP tasks' owners (`majordomus.store.tasks`) -----------------------------------------

    def owner_tasks(self, owner: str) -> str:
        """The tasks one owner (an episode, a bearer token's hash) created, scored by
        creation (epoch ms): what `majordomus://tasks` lists."""
        return f"{self.prefix}:tasks:{{{owner}}}"
