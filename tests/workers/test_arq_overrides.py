"""What majordomus takes from arq, pinned: each test fails when arq changes under us.

`workers/worker.py` (the one module that subclasses arq's `Worker`) overrides two public
methods, `main` (arq's fixed poll sleep, its take and its job runner replaced) and
`handle_sig` (a grace before cancelling), relies on `heart_beat`, `record_health` and
`close` behaving as read here, and on arq's public counters (`job_counter`,
`jobs_complete`, ...) meaning what they mean there. It overrides and reads no private name
of arq's: arq's own runner (`_poll_iteration`, `start_jobs`, `run_job`, `finish_job`...),
which names arq's process-wide keys, is reached only from arq's `main`, and a test below
follows every method majordomus can reach to show it stays so. A failure here means: read
the new arq source of that function, check the override still holds (and that no key of
arq's own is written), then update the fingerprint.
"""

from __future__ import annotations

import ast
import dis
import hashlib
import inspect
import textwrap
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import arq.constants
import arq.jobs
import pytest
from arq.connections import ArqRedis
from arq.worker import Worker

from majordomus.store.keys import Keys
from majordomus.workers.settings import worker_options
from majordomus.workers.worker import MajordomusWorker, build_worker
from tests.conftest import make_settings

ROOT = Path(__file__).resolve().parents[2]

FINGERPRINTS = {
    # arq 0.28.0
    "main": "45ca1591c9717466",
    "handle_sig": "985ff7ba01aa8f04",
    "heart_beat": "2e9959bea66dc551",
    "record_health": "108f4b8686c9402d",
    "close": "5bcc9cb356680829",
}


@pytest.mark.parametrize("name", sorted(FINGERPRINTS))
def test_the_arq_method_we_override_or_rely_on_is_the_one_we_read(name: str) -> None:
    source = inspect.getsource(getattr(Worker, name))
    assert hashlib.sha256(source.encode()).hexdigest()[:16] == FINGERPRINTS[name], (
        f"arq changed Worker.{name}: re-read it against workers/worker.py"
    )


def test_the_overrides_keep_arqs_signatures() -> None:
    for name in ("main", "handle_sig"):
        ours = inspect.signature(getattr(MajordomusWorker, name))
        theirs = inspect.signature(getattr(Worker, name))
        assert list(ours.parameters) == list(theirs.parameters), name


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def test_the_worker_overrides_no_private_name_of_arqs() -> None:
    """A method or attribute of ours named as one of arq's private ones would replace it
    (arq's code calling ours) without arq's promise that it stays."""
    clashes = sorted(n for n in vars(MajordomusWorker) if _is_private(n) and hasattr(Worker, n))
    assert clashes == []


def test_the_worker_reads_no_private_attribute_of_arqs() -> None:
    """Every `self._name` the worker reads or sets is its own, never one arq keeps."""
    ours = set(vars(MajordomusWorker))
    tree = ast.parse(inspect.getsource(MajordomusWorker))
    read = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
        and _is_private(node.attr)
    }
    assert read, "the scan sees the worker's own private attributes"
    assert sorted(read - ours) == []


# -- no key of arq's own ------------------------------------------------------------------

ARQ_KEY_NAMES = {
    name
    for name, value in vars(arq.constants).items()
    if (isinstance(value, str) and not name.startswith("_") and "arq" in value)
    or name.endswith("_suffix")
}
"""arq's key names and prefixes (`arq:job:`, `arq:abort`, `:health-check`, ...)."""


def _code_objects(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


def _arq_keys_named_by(function: Any) -> set[str]:
    """The arq key constants a function (or a function nested in it) reads as globals."""
    code = getattr(function, "__code__", None)
    if code is None:
        return set()
    return {
        str(ins.argval)
        for c in _code_objects(code)
        for ins in dis.get_instructions(c)
        if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME") and ins.argval in ARQ_KEY_NAMES
    }


def _methods_naming_arq_keys(cls: type) -> dict[str, set[str]]:
    found = {}
    for name, member in vars(cls).items():
        named = _arq_keys_named_by(member)
        if named:
            found[name] = named
    return found


def test_the_rules_see_arqs_key_names() -> None:
    assert {"job_key_prefix", "in_progress_key_prefix", "retry_key_prefix"} <= ARQ_KEY_NAMES
    assert {"result_key_prefix", "abort_jobs_ss", "health_check_key_suffix"} <= ARQ_KEY_NAMES
    assert "finish_job" in _methods_naming_arq_keys(Worker)


ARQ_KEYS_AT_CONSTRUCTION = {"__init__"}
"""arq's `__init__` names arq keys only to default the queue and the health record, which
`worker_options` always gives (checked below)."""

ENTRY_POINTS = ("__init__", "run", "async_run", "close")
"""What runs a worker: `majordomus worker` (`run`), a test or `dev` (`async_run`), and arq's
own close; every method the worker defines counts as reached too."""


def _self_references(function: Any) -> tuple[set[str], set[str]]:
    """The names a method reaches on `self` (`self.x`) and on `super()` (`super().x`)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    on_self, on_super = set(), set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        if isinstance(node.value, ast.Name) and node.value.id == "self":
            on_self.add(node.attr)
        elif (
            isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name)
            and node.value.func.id == "super"
        ):
            on_super.add(node.attr)
    return on_self, on_super


def _arq_methods_reached(cls: type) -> set[str]:
    """arq `Worker` methods a worker of class `cls` can run: from `ENTRY_POINTS` and every
    method `cls` defines itself, following `self.x` and `super().x` through both classes."""
    start = [(name, cls) for name in ENTRY_POINTS]
    start += [(name, cls) for name, member in vars(cls).items() if inspect.isfunction(member)]
    seen: set[tuple[str, type]] = set()
    reached: set[str] = set()
    while start:
        name, where = start.pop()
        owner = next((c for c in where.__mro__ if name in vars(c)), None)
        if owner is None or owner not in (cls, Worker) or (name, owner) in seen:
            continue
        seen.add((name, owner))
        member = vars(owner)[name]
        function = member.fget if isinstance(member, property) else member
        if not inspect.isfunction(function):
            continue
        if owner is Worker:
            reached.add(name)
        on_self, on_super = _self_references(function)
        start += [(n, cls) for n in on_self]
        start += [(n, Worker) for n in on_super]
    return reached


def test_the_reach_follows_arqs_own_runner_from_arqs_main() -> None:
    # Arq's own worker reaches its runner, which names arq's keys: the rule sees them.
    reached = _arq_methods_reached(Worker)
    assert {"main", "_poll_iteration", "start_jobs", "run_job", "finish_job"} <= reached
    assert "run_job" in _methods_naming_arq_keys(Worker)


def test_no_arq_method_the_worker_can_reach_names_arqs_keys() -> None:
    """An arq upgrade whose worker names one of its keys in a method ours can reach (a new
    helper, or a new call in `heart_beat`) fails here, before it writes `arq:...`."""
    reached = _arq_methods_reached(MajordomusWorker)
    assert {"heart_beat", "record_health", "close", "handle_sig"} <= reached
    assert not {"main", "_poll_iteration", "start_jobs", "run_job"} & reached
    naming = _methods_naming_arq_keys(Worker)
    assert {n: naming[n] for n in reached - ARQ_KEYS_AT_CONSTRUCTION if n in naming} == {}
    assert _methods_naming_arq_keys(MajordomusWorker) == {}


async def test_the_queue_and_health_record_are_given_under_the_prefix() -> None:
    cfg = make_settings("redis://127.0.0.1:6379/10", key_prefix="kp1")
    options = worker_options(cfg)
    keys = Keys("kp1")
    assert (options["queue_name"], options["health_check_key"]) == (
        keys.queue_name,
        keys.health_check,
    )
    assert not options.get("allow_abort_jobs") and not options.get("cron_jobs")
    worker = build_worker(cfg, redis=object(), handle_signals=False)
    assert worker.queue_name.startswith("kp1:") and worker.health_check_key.startswith("kp1:")


def test_nothing_calls_the_arq_client_methods_that_name_arqs_keys() -> None:
    """`ArqRedis.enqueue_job`, `all_job_results` and the like (and arq's `Job`) build arq's
    key names: majordomus enqueues in `create.lua` and reads executions, never arq's jobs."""
    forbidden = set(_methods_naming_arq_keys(ArqRedis)) | {"Job"}
    assert "enqueue_job" in forbidden
    found = []
    for package in ("majordomus", "workers", "api"):
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                called = None
                if isinstance(node, ast.Attribute) and node.attr in forbidden:
                    called = node.attr
                elif isinstance(node, ast.Name) and node.id in forbidden:
                    called = node.id
                elif isinstance(node, ast.ImportFrom) and node.module == "arq.constants":
                    called = "arq.constants"
                if called:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {called}")
    assert found == []
