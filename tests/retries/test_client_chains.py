"""A retry chain seen from `majordomus.Client`, on real workers, on either transport: the
outcome is the chain's last attempt's, as the capability's own route answers it. The test
process imports none of the retry capabilities: straight to Redis, the client starts them
by id from the declarations the workers published."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from majordomus import Client, MajordomusError
from majordomus.engine import Engine
from tests.conftest import builtins_only
from tests.retries.conftest import Stack, attempts_in
from tests.retries.workload import FLAKY

pytestmark = [pytest.mark.slow, pytest.mark.process]


@pytest.fixture(params=["redis", "http"])
async def client(request: Any, stack: Stack, engine: Engine) -> Any:
    if request.param == "redis":
        # A producer's engine: the retry capabilities known by their published declarations.
        producer = Engine(engine.redis, builtins_only(), engine.settings)
        assert FLAKY not in producer.registry
        yield Client.from_engine(producer)
    else:
        async with Client(stack.api.url) as c:
            yield c


async def test_a_retried_chain_answers_its_last_attempts_output(
    client: Client, marker: Path
) -> None:
    execution = await client.start(FLAKY, {"marker": str(marker), "fail_times": 2})
    assert await execution.result(timeout=30) == {"attempts": 3}
    first = await execution.wait()
    assert first.state == "failed" and isinstance(first.retried_as, str)  # this attempt's own
    assert len(attempts_in(marker)) == 3


async def test_a_chain_that_runs_out_raises_the_last_attempts_error(
    client: Client, marker: Path
) -> None:
    with pytest.raises(MajordomusError) as raised:
        await client.call(FLAKY, {"marker": str(marker), "fail_times": 9}, timeout=30)
    last = await client.get(str(raised.value.correlation_id))
    assert raised.value.code == "internal" and last.attempt == 3 and last.state == "failed"
