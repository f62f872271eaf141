"""The arq internals majordomus builds on, pinned: each test fails when arq changes under us.

`workers/worker.py` (the one module that overrides arq) replaces `Worker.main` (its fixed
poll sleep) and `Worker.start_jobs` (one script to take a job), hooks
`_release_sem_dec_counter_on_complete` and `handle_sig`, and relies on `_poll_iteration`,
`run_job` and `finish_job` behaving as read here; `majordomus/store/queue.py` builds arq's
job with `serialize_job` and names its keys. A failure here means: read the new arq source
of that function, check the override still holds, then update the fingerprint.
"""

from __future__ import annotations

import hashlib
import inspect

import arq.constants
import arq.jobs
import pytest
from arq.worker import Worker

from workers.worker import MajordomusWorker

FINGERPRINTS = {
    # arq 0.28.0
    "main": "45ca1591c9717466",
    "start_jobs": "b45797cfa40bed7f",
    "_poll_iteration": "f8d39d823a0a59f2",
    "run_job": "589a19059ff84ee7",
    "_release_sem_dec_counter_on_complete": "0ed101482e942c33",
    "handle_sig": "985ff7ba01aa8f04",
    "finish_job": "903f09c92830d3fd",
}


@pytest.mark.parametrize("name", sorted(FINGERPRINTS))
def test_the_arq_method_we_override_or_rely_on_is_the_one_we_read(name: str) -> None:
    source = inspect.getsource(getattr(Worker, name))
    assert hashlib.sha256(source.encode()).hexdigest()[:16] == FINGERPRINTS[name], (
        f"arq changed Worker.{name}: re-read it against workers/worker.py"
    )


def test_the_overrides_keep_arqs_signatures() -> None:
    for name in ("main", "start_jobs", "_release_sem_dec_counter_on_complete", "handle_sig"):
        ours = inspect.signature(getattr(MajordomusWorker, name))
        theirs = inspect.signature(getattr(Worker, name))
        assert list(ours.parameters) == list(theirs.parameters), name


def test_the_job_format_and_key_names_are_arqs() -> None:
    params = list(inspect.signature(arq.jobs.serialize_job).parameters)
    assert params[:5] == ["function_name", "args", "kwargs", "job_try", "enqueue_time_ms"]
    assert "serializer" in params
    assert (
        arq.constants.job_key_prefix,
        arq.constants.in_progress_key_prefix,
        arq.constants.retry_key_prefix,
    ) == ("arq:job:", "arq:in-progress:", "arq:retry:")
