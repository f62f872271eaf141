"""The roll-up on the suite's three-master Redis Cluster: each partition counts its own
executions on the master of its slot (take.lua and append.lua write it in their step,
which a key of another slot would fail), and `executions.stats` sums the masters.
"""

from __future__ import annotations

import pytest

from majordomus.store.keys import slot_of
from tests.api.conftest import start, wait_final
from tests.cluster.test_cluster_behaviour import PARTITIONS, Deployment

pytestmark = [pytest.mark.slow, pytest.mark.process]


def test_each_partition_counts_on_its_own_master_and_the_stats_sum_them(
    deployment: Deployment,
) -> None:
    keys, cluster = deployment.keys, deployment.cluster
    with deployment.api.client() as http:
        ok = [start(http, "executions.demonstrate", steps=1, delay_ms=5) for _ in range(12)]
        failed = [
            start(http, "executions.demonstrate", steps=2, fail_at=1, delay_ms=5) for _ in range(3)
        ]
        assert {keys.partition_of(s["id"]).index for s in ok + failed} == set(range(PARTITIONS))
        for s in ok + failed:
            wait_final(http, s["id"])
        answer = http.get("/api/v1/executions/stats").json()
    total = answer["overall"]["total"]
    assert (total["started"], total["succeeded"], total["failed"]) == (15, 12, 3)
    assert [s["capability"] for s in answer["capabilities"]] == ["executions.demonstrate"]
    # Every partition's roll-up lies on the master of its slot, beside its executions.
    by_partition = {p.index: p for p in keys.partitions}
    for port in cluster.ports:
        for raw in cluster.ask(port, "KEYS", "md:*rollup:*"):
            key = raw.decode() if isinstance(raw, bytes) else raw
            part = next(p for p in by_partition.values() if key.startswith(p.base))
            assert cluster.owner(slot_of(key)) == cluster.owner(slot_of(part.tag)) == port
    written = {
        p.index
        for port in cluster.ports
        for raw in cluster.ask(port, "KEYS", "md:*rollup:*")
        for p in keys.partitions
        if (raw.decode() if isinstance(raw, bytes) else raw).startswith(p.base)
    }
    assert written == set(range(PARTITIONS))
