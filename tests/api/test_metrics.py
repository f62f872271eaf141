"""Prometheus scrapes, as Prometheus makes them: the API's `GET /metrics` over a real socket
after executions succeeded and failed, a worker's own metrics port after it ran some, a
scrape while Redis is down, the token, and the metrics reference's list
(docs/reference/metrics.md) of every metric a scrape can answer. Every scrape is parsed with prometheus_client's own parser."""

from __future__ import annotations

import asyncio
import re
import socket
import time
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from majordomus.api.app import create_app
from majordomus.engine import Engine
from majordomus.local.embedded import EmbeddedRedis, free_port
from majordomus.metrics import METRICS
from majordomus.registry import REGISTRY
from majordomus.scrape import cluster_families
from majordomus.store.connect import connect
from tests.api.conftest import TOKEN, ApiProcess, WorkerChild, start, wait_final
from tests.conftest import LIVENESS_SECONDS, ROOT, make_settings

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parsed(text: str) -> tuple[dict[str, str], Samples]:
    """A scrape's families (name: type) and samples (name and labels: value)."""
    types: dict[str, str] = {}
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return types, samples


def scrape(client: httpx.Client, path: str = "/metrics", **kwargs: Any) -> Samples:
    response = client.get(path, **kwargs)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return parsed(response.text)[1]


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def grew(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def test_the_api_scrape_counts_what_it_started_and_reads_the_cluster(
    http: httpx.Client,
) -> None:
    before = scrape(http)
    done = wait_final(http, start(http, "tests.noop")["id"])
    boom = wait_final(http, start(http, "tests.boom")["id"])
    assert (done["state"], boom["state"]) == ("succeeded", "failed")
    after = scrape(http)

    assert grew(before, after, "majordomus_executions_started_total", capability="tests.noop") == 1
    assert grew(before, after, "majordomus_executions_started_total", capability="tests.boom") == 1
    assert grew(before, after, "majordomus_events_appended_total") >= 4  # created and queued
    assert value(after, "majordomus_redis_up") == 1
    assert value(after, "majordomus_workers_alive") >= 1
    assert ("majordomus_live_listeners", ()) in after
    # Not a capability: in neither the registry's routes nor the OpenAPI document.
    listed = http.get("/api/v1/capabilities").json()["capabilities"]
    assert not any((c["exposure"].get("http") or {}).get("path") == "/metrics" for c in listed)
    assert "/metrics" not in http.get("/openapi.json").json()["paths"]
    refused = http.post("/metrics")
    assert refused.status_code == 405 and refused.headers["allow"] == "GET"


def test_with_a_token_the_scrape_needs_it(locked_api: ApiProcess) -> None:
    with locked_api.client() as client:
        assert client.get("/metrics").status_code == 401
        assert client.get("/metrics", headers={"Authorization": "Bearer nope"}).status_code == 401
        samples = scrape(client, headers={"Authorization": f"Bearer {TOKEN}"})
        assert ("majordomus_redis_up", ()) in samples


@pytest.mark.usefixtures("spawns")
async def test_a_worker_serves_its_metrics_on_a_port_of_its_own(suite_redis_url: str) -> None:
    # A key prefix of the test's own: the package's worker never takes these executions.
    settings = make_settings(suite_redis_url, key_prefix="mdmetrics")
    port = free_port()
    worker = WorkerChild(
        suite_redis_url, MAJORDOMUS_KEY_PREFIX="mdmetrics", MAJORDOMUS_METRICS_PORT=str(port)
    )
    redis = connect(suite_redis_url, arq=True)
    engine = Engine(redis, REGISTRY, settings)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        deadline = time.monotonic() + 20
        while True:
            assert worker.process.poll() is None, worker.output()
            try:
                before = parsed(httpx.get(url, timeout=2).text)[1]
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, f"no metrics port:\n{worker.output()}"
                time.sleep(0.05)
        ids = [(await engine.start(cap)).id for cap in ("tests.noop", "tests.boom", "tests.noop")]
        states = [(await engine.wait(i, 20_000)).state for i in ids]
        assert states == ["succeeded", "failed", "succeeded"]
        response = httpx.get(url, timeout=5)
        assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
        types, after = parsed(response.text)
    finally:
        worker.stop()
        await redis.aclose()

    noop, boom = {"capability": "tests.noop"}, {"capability": "tests.boom"}
    finished = "majordomus_executions_finished_total"
    assert grew(before, after, finished, state="succeeded", **noop) == 2
    assert grew(before, after, finished, state="failed", **boom) == 1
    assert grew(before, after, "majordomus_execution_duration_seconds_count", **noop) == 2
    assert grew(before, after, "majordomus_execution_duration_seconds_count", **boom) == 1
    assert value(after, "majordomus_execution_duration_seconds_bucket", le="+Inf", **noop) >= 2
    assert grew(before, after, "majordomus_events_appended_total") >= 6  # started, terminal x3
    assert types["majordomus_execution_duration_seconds"] == "histogram"
    assert "majordomus_queue_depth" not in types  # the cluster's figures are the API's


@pytest.mark.usefixtures("spawns")
def test_a_metrics_port_taken_stops_the_worker_with_one_line(suite_redis_url: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        worker = WorkerChild(suite_redis_url, MAJORDOMUS_METRICS_PORT=str(port))
        code = worker.process.wait(30)
        text = worker.output()
    worker.stop()
    assert code == 2, text
    assert f"cannot serve the worker's metrics on 127.0.0.1:{port}" in text, text
    assert "Traceback" not in text, text


@pytest.mark.usefixtures("spawns")
async def test_a_scrape_while_redis_is_down_still_answers() -> None:
    server = EmbeddedRedis().start()
    settings = make_settings(server.url)
    redis = connect(server.url, arq=True)
    engine = Engine(redis, REGISTRY, settings)
    app = create_app(settings, engine, mount_mcp=False)
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            await engine.start("tests.noop")
            up = await client.get("/metrics")
            assert up.status_code == 200
            up_samples = parsed(up.text)[1]
            assert value(up_samples, "majordomus_redis_up") == 1
            assert value(up_samples, "majordomus_queue_depth", capability="tests.noop") == 1

            server.stop()
            began = time.monotonic()
            # Answered, not held by the outage (its read of Redis has its own bound).
            down = await asyncio.wait_for(client.get("/metrics"), LIVENESS_SECONDS)
            print(f"a scrape during the outage took {time.monotonic() - began:.2f} s")
    finally:
        server.stop()
        await redis.aclose()
    assert down.status_code == 200, down.text
    assert down.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert "Traceback" not in down.text
    types, samples = parsed(down.text)
    assert value(samples, "majordomus_redis_up") == 0
    assert "majordomus_queue_depth" not in types
    assert ("majordomus_events_appended_total", ()) in samples  # the process's, as always


DOCUMENTED_METRIC = re.compile(r"^\| `(majordomus_[a-z_]+)` \| (counter|gauge|histogram) \|", re.M)


async def test_the_metrics_reference_documents_every_metric_a_scrape_answers(
    engine: Engine,
) -> None:
    page = (ROOT / "docs" / "reference" / "metrics.md").read_text()
    documented = dict(DOCUMENTED_METRIC.findall(page))
    await engine.start("tests.noop")  # so every scrape-time family has a sample
    families = [*METRICS.registry.collect(), *await cluster_families(engine, listeners=0)]
    answered = {f.name + ("_total" if f.type == "counter" else ""): f.type for f in families}
    assert all(name.startswith("majordomus_") for name in answered)
    assert documented == answered
