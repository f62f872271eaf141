"""The arq internals majordomus builds on, pinned: each test fails when arq changes under us.

`workers/worker.py` (the one module that overrides arq) replaces `Worker.main` (its fixed
poll sleep), `Worker._poll_iteration` and `start_jobs` (one script polls, takes and starts
a batch), arq's job runner (`run_job`, `finish_job`, `finish_failed_job`,
`_cancel_aborted_jobs`: they name arq's process-wide keys, `arq:job:<id>` and the like, so
`_run_execution` does their work with the prefix's keys) and
`_release_sem_dec_counter_on_complete`, hooks `handle_sig`, and relies on `heart_beat`,
`record_health` and `close` behaving as read here, and on arq's counters (`job_counter`,
`jobs_complete`, ...) meaning what they mean there. A failure here means: read the new arq
source of that function, check the override still holds (and that no key of arq's own is
written), then update the fingerprint.
"""

from __future__ import annotations

import ast
import dis
import hashlib
import inspect
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
from majordomus.workers.settings import build_worker, worker_options
from majordomus.workers.worker import MajordomusWorker
from tests.conftest import make_settings

ROOT = Path(__file__).resolve().parents[2]

FINGERPRINTS = {
    # arq 0.28.0
    "main": "45ca1591c9717466",
    "start_jobs": "b45797cfa40bed7f",
    "_poll_iteration": "f8d39d823a0a59f2",
    "run_job": "589a19059ff84ee7",
    "_release_sem_dec_counter_on_complete": "0ed101482e942c33",
    "handle_sig": "985ff7ba01aa8f04",
    "finish_job": "903f09c92830d3fd",
    "finish_failed_job": "3e16087f318a7acf",
    "_cancel_aborted_jobs": "54575eaf8682f95b",
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
    for name in (
        "main",
        "_poll_iteration",
        "start_jobs",
        "_release_sem_dec_counter_on_complete",
        "handle_sig",
        "run_job",
        "finish_failed_job",
        "_cancel_aborted_jobs",
    ):
        ours = inspect.signature(getattr(MajordomusWorker, name))
        theirs = inspect.signature(getattr(Worker, name))
        assert list(ours.parameters) == list(theirs.parameters), name


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


def test_every_arq_worker_method_that_names_arqs_keys_is_replaced() -> None:
    """An arq upgrade whose worker names one of its keys in a method we inherit (a new
    helper, or a new call in the poll loop) fails here, before it writes `arq:...`."""
    inherited = {
        name: keys
        for name, keys in _methods_naming_arq_keys(Worker).items()
        if name not in ARQ_KEYS_AT_CONSTRUCTION and name not in vars(MajordomusWorker)
    }
    assert inherited == {}
    assert _methods_naming_arq_keys(MajordomusWorker) == {}


async def test_the_queue_and_health_record_are_given_under_the_prefix() -> None:
    cfg = make_settings("redis://127.0.0.1:6379/10", key_prefix="kp1")
    options = worker_options(cfg)
    keys = Keys("kp1")
    assert (options["queue_name"], options["health_check_key"]) == (keys.queue_name, keys.health_check)
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
