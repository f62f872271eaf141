"""`Environment`: the real engine and real workers in the test's process, on a Redis of its own.

    async with Environment(["greetings"]) as env:
        snap = await env.engine.start("greetings.hello", {"name": "Ada", "token": "t"})
        await env.skip(hours=1)

An environment opens a Redis (`majordomus.testing.servers`: in-process fakeredis by
default, the embedded server, or a URL), an `Engine` on it (what every surface calls), a
sweeper (as an API process runs one) and one or more workers (`majordomus.workers`, in
this process: `majordomus.testing.workers`), each with its ticker and sweeper. Nothing is
stubbed: executions are created, taken, run and ended by the same scripts and code as in
production, and their events are read back through the engine (or `env.client`).

On fakeredis, time can be skipped (`skip`): the environment puts a virtual clock in
majordomus's clock's place (`majordomus.clock.use`) and has fakeredis read it, and
`majordomus.testing.skipping` moves it ahead, letting what comes due run at each moment.
One such environment runs at a time in a process (the clock is the process's). On a real
server (`"embedded"` or a URL) the server's own clock decides, and `skip` refuses.

Leaving the block stops the workers (their executions cancelled, `by: "server"`), the
sweeper and the Redis it opened, removes its keys from a Redis it was given, and puts the
wall clock back.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import TYPE_CHECKING, Any

import msgspec

from majordomus import clock
from majordomus.builtins import MODULES as BUILTIN_MODULES
from majordomus.config import Settings
from majordomus.engine import Engine
from majordomus.errors import refused
from majordomus.loading import load_capabilities
from majordomus.loops import within
from majordomus.registry import Registry
from majordomus.store.testing import forget_prefix, severable
from majordomus.sweeper import Sweeper, concurrency_of, per_key_of
from majordomus.testing.clock import VirtualClock
from majordomus.testing.servers import EnvironmentRedis, RedisKind, open_redis
from majordomus.testing.skipping import Skipper
from majordomus.testing.workers import InProcessWorker, TaskLedger

if TYPE_CHECKING:
    from majordomus.client import Client

Capabilities = Iterable[str | ModuleType] | Registry
"""Module names or modules to import (their capabilities join the built-ins in the
process's registry), or a `Registry` to run as it is."""

CLOSE_SECONDS = 30.0
"""How long leaving the block may take before what is left is abandoned."""


class Environment:
    """The engine and workers of majordomus in this process, on a Redis of their own.

    - `capabilities`: module names or modules (as `MAJORDOMUS_CAPABILITIES` names them),
      or a `Registry`;
    - `redis`: `"fake"` (in-process fakeredis: time can be skipped), `"embedded"` (a real
      server started for it) or a Redis URL;
    - `workers`: how many workers start with it (`start_worker` starts more);
    - `settle_seconds`: how long a skip waits for an execution it let start to end before
      leaving it running (a long runner);
    - `settings`, and any `Settings` field as a keyword (`lease_seconds=5`): the
      configuration, as the environment variables would give it (none are read).
    """

    def __init__(
        self,
        capabilities: Capabilities = (),
        *,
        redis: str = "fake",
        workers: int = 1,
        settle_seconds: float = 0.5,
        settings: Settings | None = None,
        **overrides: Any,
    ) -> None:
        self._capabilities = capabilities
        self._redis_choice = redis
        self._initial_workers = workers
        self._settle_seconds = settle_seconds
        self._base_settings = settings
        self._overrides = overrides
        self._token = secrets.token_hex(3)
        self._ledger = TaskLedger()
        self._previous_clock: clock.Clock | None = None
        self._follows_clock = False
        self._sweeper: Sweeper | None = None
        self._skipper: Skipper | None = None
        self.redis: EnvironmentRedis | None = None
        self.settings: Settings | None = None
        self.registry: Registry | None = None
        self.clock: VirtualClock | None = None
        """The virtual clock (fakeredis only; None on a real server)."""
        self.workers: list[InProcessWorker] = []
        """Every worker it started, the stopped and killed ones too."""
        self._engine: Engine | None = None

    # -- what a test reads ---------------------------------------------------------------

    @property
    def engine(self) -> Engine:
        """The engine every surface calls (`start`, `get`, `events`, `wait`, `cancel`...)."""
        if self._engine is None:
            raise RuntimeError("the environment is not open: use `async with Environment(...)`")
        return self._engine

    @property
    def client(self) -> Client:
        """A `majordomus.Client` on the engine: `start`, `call`, `get`, `events`, `cancel`,
        `wait`, as an application calls them."""
        from majordomus.client import Client

        return Client.from_engine(self.engine)

    @property
    def redis_kind(self) -> RedisKind:
        """`"fake"`, `"embedded"` or `"url"`: which Redis it runs on."""
        return self._opened().kind

    @property
    def redis_description(self) -> str:
        """Which Redis it runs on, in a line."""
        return self._opened().description

    @property
    def can_skip_time(self) -> bool:
        """Whether `skip` works here (on fakeredis)."""
        return self.clock is not None

    @property
    def live_workers(self) -> list[InProcessWorker]:
        return [w for w in self.workers if w.alive]

    def now(self) -> datetime:
        """The time of day as majordomus reads it (skips included), UTC."""
        return datetime.fromtimestamp(clock.now(), tz=UTC)

    # -- life ----------------------------------------------------------------------------

    async def __aenter__(self) -> Environment:
        try:
            await self._open()
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _open(self) -> None:
        self.redis = redis = open_redis(self._redis_choice)
        self.registry, names = _registry_of(self._capabilities)
        self.settings = settings = self._settings_for(redis, names)
        if redis.can_skip_time:
            self._take_the_clock()
        self._ledger.install()
        self._engine = engine = Engine(
            redis.client(name=f"majordomus-testing-{self._token}"), self.registry, settings
        )
        self._sweeper = Sweeper(
            engine.store,
            settings,
            f"testing:{self._token}",
            concurrency_of(self.registry),
            engine=engine,
            per_key=per_key_of(self.registry),
        )
        self._sweeper.start()
        if self.clock is not None:
            self._skipper = Skipper(
                self.clock, engine, lambda: self.workers, self._settle_seconds
            )
        for _ in range(self._initial_workers):
            await self.start_worker()
        if self._skipper is not None:
            await self._skipper.settle()  # the tickers have synced the declared schedules

    def _settings_for(self, redis: EnvironmentRedis, names: list[str]) -> Settings:
        given = msgspec.structs.asdict(self._base_settings) if self._base_settings else {}
        fixed: dict[str, Any] = {"redis_url": redis.url, "capabilities": names, "metrics_port": None}
        if redis.key_prefix is not None:
            fixed["key_prefix"] = redis.key_prefix
        return Settings.from_env({}, **{**given, **fixed, **self._overrides})

    def _take_the_clock(self) -> None:
        from majordomus.store.fake_clock import follow_the_clock

        if clock.in_use() is not clock.WALL:
            raise RuntimeError(
                "another Environment on fakeredis is open in this process: its virtual clock "
                "is the process's clock, so one runs at a time (close it first)"
            )
        self.clock = VirtualClock()
        self._previous_clock = clock.use(self.clock)
        follow_the_clock()
        self._follows_clock = True

    async def aclose(self) -> None:
        """Stop everything it started (see the module); safe to call twice."""
        engine, self._engine = self._engine, None
        if engine is not None:
            await within(CLOSE_SECONDS, self._stop_all(engine))
            if self.redis is not None and self.redis.key_prefix is not None:
                with contextlib.suppress(Exception):
                    await forget_prefix(engine.redis, self.redis.key_prefix)
            with contextlib.suppress(Exception):
                await engine.redis.aclose(close_connection_pool=True)
        self._ledger.uninstall()
        if self._previous_clock is not None:
            clock.use(self._previous_clock)
            self._previous_clock = None
        if self._follows_clock:
            from majordomus.store.fake_clock import leave_the_clock

            leave_the_clock()
            self._follows_clock = False
        if self.redis is not None:
            self.redis.stop()

    async def _stop_all(self, engine: Engine) -> None:
        for w in self.workers:
            if w.alive:
                await w.stop(engine.redis)
            else:  # what a killed one left behind (a report writer started after the kill)
                await w.reap()
        if self._sweeper is not None:
            await self._sweeper.stop()

    # -- workers -------------------------------------------------------------------------

    async def start_worker(self) -> InProcessWorker:
        """Start one more worker (with its ticker and sweeper); answers it once it takes work."""
        redis, settings, registry = self._opened(), self.settings, self.registry
        assert settings is not None and registry is not None
        number = len(self.workers) + 1
        client = redis.client(arq=True, name=f"majordomus-testing-{self._token}-worker-{number}")
        worker = InProcessWorker(number, client, severable(client), settings, registry)
        self.workers.append(worker)
        await worker.start()
        return worker

    async def kill_worker(self, worker: InProcessWorker | None = None) -> InProcessWorker:
        """Kill a worker (the first live one by default) as SIGKILL would: no last event,
        its lease and the executions it ran left as they are, until its lease runs out and
        a sweeper fails them `unavailable` (skip `lease_seconds` to see it). Answers it."""
        if worker is None:
            live = self.live_workers
            if not live:
                raise RuntimeError("no live worker to kill")
            worker = live[0]
        await worker.kill(self.engine.redis)
        return worker

    async def stop_worker(self, worker: InProcessWorker | None = None) -> InProcessWorker:
        """Stop a worker cleanly (the first live one by default): what it runs is cancelled
        (`by: "server"`), its lease removed. Answers it."""
        if worker is None:
            live = self.live_workers
            if not live:
                raise RuntimeError("no live worker to stop")
            worker = live[0]
        await worker.stop(self.engine.redis)
        return worker

    # -- time ----------------------------------------------------------------------------

    async def skip(
        self,
        delta: timedelta | float = 0.0,
        /,
        *,
        seconds: float = 0.0,
        minutes: float = 0.0,
        hours: float = 0.0,
        days: float = 0.0,
    ) -> None:
        """Skip time ahead (`delta`, a `timedelta` or seconds, plus the keywords) and let
        everything that comes due meanwhile run, moment by moment (delayed starts, retry
        backoffs, schedule ticks, leases running out and the sweeper's passes), before
        returning. `skip()` alone lets what is due now run. Fakeredis only.

        Keys expire in the time skipped as they would have: finished executions past
        `MAJORDOMUS_RETAIN_SECONDS` (7 days) are gone after a skip of a month, as in
        production. An execution still running when it would be waited for past
        `settle_seconds` (one that sleeps, waits to be cancelled, or works long) is left
        running: its own waits are real time."""
        amount = delta.total_seconds() if isinstance(delta, timedelta) else float(delta)
        amount += seconds + 60 * minutes + 3600 * hours + 86400 * days
        if self._skipper is None:
            self._opened()
            raise refused(
                f"time cannot be skipped on {self.redis_description}: a real server keeps its "
                "own clock for TIME and key expiry",
                "open the Environment with redis='fake' (the default) to skip time",
            )
        await self._skipper.skip(amount)

    # -- helpers -------------------------------------------------------------------------

    def _opened(self) -> EnvironmentRedis:
        if self.redis is None:
            raise RuntimeError("the environment is not open: use `async with Environment(...)`")
        return self.redis


def _registry_of(capabilities: Capabilities) -> tuple[Registry, list[str]]:
    """The registry to run, and the module names the settings then carry. A `Registry`
    runs beside the built-ins (which the engine's own answers need), in a registry of the
    environment's: the one given is not changed."""
    if not isinstance(capabilities, Registry):
        names = [c.__name__ if isinstance(c, ModuleType) else str(c) for c in capabilities]
        return load_capabilities(names), names
    run = Registry()
    for cap in load_capabilities([]):
        builtin = getattr(cap.handler, "__module__", "") in BUILTIN_MODULES
        if builtin and cap.id not in capabilities:
            run.add(cap)
    for cap in capabilities:
        run.add(cap)
    return run, []
