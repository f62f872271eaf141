"""Finding and bulk actions on the suite's three-master Redis Cluster: a searchable member's
index is written by create.lua in the execution's own slot (a key of another slot would
fail the script), so each partition's index lies on the master of its slot, and a search
merges the masters' indexes newest first; a bulk cancel walks every partition.
"""

from __future__ import annotations

import time

import pytest

from majordomus.store.keys import slot_of
from tests.cluster.test_cluster_behaviour import PARTITIONS, Deployment

pytestmark = [pytest.mark.slow, pytest.mark.process]


def test_a_search_merges_each_masters_index_and_a_bulk_cancel_walks_every_partition(
    deployment: Deployment,
) -> None:
    keys, cluster = deployment.keys, deployment.cluster
    later = {"delay_ms": 3_600_000}
    with deployment.api.client() as http:
        made = []
        for _ in range(15):
            answer = http.post(
                "/api/v1/executions/start",
                json={"capability": "tests.order", "input": {"customer": "acme"}, **later},
            )
            assert answer.status_code == 200, answer.text
            made.append(answer.json()["id"])
            time.sleep(0.002)  # a millisecond of its own: newest first is exact across partitions
        assert {keys.partition_of(i).index for i in made} == set(range(PARTITIONS))
        params = {"capability": "tests.order", "search": "customer=acme"}
        listed = http.get("/api/v1/executions", params=params).json()
        assert [x["id"] for x in listed["executions"]] == made[::-1]
        assert http.get("/api/v1/executions/count", params=params).json()["cancellable"] == 15

        # Each partition's index lies on the master of its slot, beside its executions.
        for port in cluster.ports:
            for raw in cluster.ask(port, "KEYS", "md:*idx:in:*"):
                key = raw.decode() if isinstance(raw, bytes) else raw
                part = next(p for p in keys.partitions if key.startswith(p.base))
                assert cluster.owner(slot_of(key)) == cluster.owner(slot_of(part.tag)) == port

        cancelled = http.post(
            "/api/v1/executions/cancel_matching", json=params, headers={"Prefer": "wait=30"}
        )
        assert cancelled.status_code == 200, cancelled.text
        assert cancelled.json()["cancelled"] == 15
        states = {
            http.get("/api/v1/executions/get", params={"id": i}).json()["state"] for i in made
        }
        assert states == {"cancelled"}
