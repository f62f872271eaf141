"""Flow control on the suite's three-master Redis Cluster (issue 35, point 5): every
execution of one key is created in the partition its key picks, beside its slots, its
waiting list and its rate bucket (a script's keys of another slot would fail), so a limit
per key is exact across workers and masters; a capability's global rate bucket lies in the
one partition that keeps its executions; different keys spread over the partitions.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from majordomus.store.keys import slot_of
from tests.api.conftest import start, wait_final
from tests.cluster.test_cluster_behaviour import Deployment
from tests.workers.test_per_key import STAMP_SLACK_MS, most_at_once

pytestmark = [pytest.mark.slow, pytest.mark.process]


def _ms(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000


def _spans(snaps: list[dict[str, Any]]) -> list[tuple[float, float]]:
    return [(_ms(s["started_at"]), _ms(s["finished_at"])) for s in snaps]


def test_a_keys_executions_slots_and_bucket_live_on_the_master_of_its_partition(
    deployment: Deployment,
) -> None:
    keys = deployment.keys
    tenants = [f"tenant-{n}" for n in range(8)]
    with deployment.api.client() as http:
        made = {
            t: [start(http, "tests.per_tenant", tenant=t, seconds=0.05)["id"] for _ in range(5)]
            for t in tenants
        }
        rated = [start(http, "tests.rated_per_tenant", tenant=t)["id"] for t in tenants[:3] * 3]
        done = {t: [wait_final(http, i) for i in ids] for t, ids in made.items()}
        rated_done = [wait_final(http, i) for i in rated]
    # One partition per key, the key's; the keys spread over more than one.
    used = set()
    for tenant, ids in made.items():
        parts = {keys.partition_of(i).index for i in ids}
        assert parts == {keys.partition_of_concurrency_key("tests.per_tenant", tenant).index}
        used |= parts
        assert all(s["state"] == "succeeded" for s in done[tenant])
        assert most_at_once(_spans(done[tenant])) <= 2, tenant
    assert len(used) > 1
    assert all(s["state"] == "succeeded" for s in rated_done)
    # Two a second per tenant: the k-th start of a tenant no sooner than k × 500 ms after its
    # first (its turn; by the workers' stamps, taken as each take was sent: `STAMP_SLACK_MS`).
    for tenant in tenants[:3]:
        starts = sorted(_ms(s["started_at"]) for s in rated_done if s["input"]["tenant"] == tenant)
        assert all(t - starts[0] >= k * 500 - STAMP_SLACK_MS for k, t in enumerate(starts)), starts
    # Each key's slots, waiting list and set of keys waiting (here, a tenant's three of a
    # second, two running and one waiting) on the master of its partition's slot.
    with deployment.api.client() as http:
        held = [start(http, "tests.per_tenant", tenant="held", seconds=1.0)["id"] for _ in range(3)]
        found = _slot_keys_on_their_masters(deployment)
        assert all(wait_final(http, i)["state"] == "succeeded" for i in held)
    assert found >= 3


def _slot_keys_on_their_masters(deployment: Deployment) -> int:
    """How many keys of slots, waiting lists and rate buckets there are, each checked to lie
    on the master of its partition's slot."""
    keys, cluster = deployment.keys, deployment.cluster
    found = 0
    for port in cluster.ports:
        for raw in cluster.ask(port, "KEYS", "md:*"):
            key = raw.decode() if isinstance(raw, bytes) else raw
            if ":conc:" not in key and ":rate:" not in key:
                continue
            part = next(p for p in keys.partitions if key.startswith(p.base))
            assert cluster.owner(slot_of(key)) == cluster.owner(slot_of(part.tag)) == port
            found += 1
    return found
