"""`majordomus.Client` finds and acts on either transport, against a real API process and a
real worker process: a search by a searchable member, a time range, a sort, the count of a
filter and a bulk cancel started with that filter answer alike straight to Redis and
through the HTTP API."""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest

from majordomus import Client, MajordomusError
from tests.api.conftest import ApiProcess, WorkerChild

pytestmark = pytest.mark.process


@pytest.fixture(params=["redis", "http"])
async def client(
    request: Any, api: ApiProcess, worker_process_for_api: WorkerChild, suite_redis_url: str
) -> Any:
    url = suite_redis_url if request.param == "redis" else api.url
    async with Client(url) as c:
        yield c


async def test_a_client_searches_counts_and_cancels_all_matching_on_either_transport(
    client: Client,
) -> None:
    customer = "c-" + uuid.uuid4().hex[:8]
    later = timedelta(hours=1)
    made = []
    for _ in range(4):
        made.append((await client.start("tests.order", {"customer": customer}, delay=later)).id)
        await asyncio.sleep(0.002)  # a millisecond of its own: the range below is to the ms
    listed = await client.list(capability="tests.order", search=f"customer={customer}")
    assert [x.id for x in listed.executions] == made[::-1]
    anywhere = await client.list(search=f"customer={customer}", order="asc")
    assert [x.id for x in anywhere.executions] == made
    first = datetime.fromisoformat((await client.get(made[1])).created_at.replace("Z", "+00:00"))
    ranged = await client.list(search=f"customer={customer}", created_after=first)
    assert [x.id for x in ranged.executions] == made[:0:-1]
    counted = await client.count(search=f"customer={customer}")
    assert (counted.matching, counted.cancellable) == (4, 4)
    with pytest.raises(MajordomusError) as unindexed:
        await client.list(capability="tests.order", search="note=x")
    assert unindexed.value.code == "not_found"

    out = await client.call(
        "executions.cancel_matching", {"search": f"customer={customer}"}, timeout=30
    )
    assert out["cancelled"] == 4
    assert (await client.count(search=f"customer={customer}", state="cancelled")).matching == 4
