"""The suite's own cluster launcher (`majordomus/local/cluster.py`): the ports it
chooses are distinct (a node's bus once took another node's port, and that node never
started), and a node whose port is taken before it binds moves to other free ports."""

from __future__ import annotations

import socket

import pytest

from majordomus.local.cluster import LocalCluster
from majordomus.local.embedded import free_ports
from tests.cluster.conftest import _binaries

pytestmark = [pytest.mark.process]


def test_free_ports_are_distinct_and_free() -> None:
    ports = free_ports(64)
    assert len(set(ports)) == 64
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # raises if it were taken


def test_a_cluster_chooses_distinct_client_and_bus_ports() -> None:
    cluster = LocalCluster("redis-server", "redis-cli", size=3)  # chosen, never started
    try:
        chosen = [*cluster.ports, *cluster.bus_ports.values()]
        assert len(set(chosen)) == 6
    finally:
        cluster.close()


@pytest.mark.usefixtures("spawns")
def test_a_node_whose_port_is_taken_before_it_starts_moves_to_free_ports() -> None:
    cluster = LocalCluster(*_binaries(), size=1)
    squatter = socket.socket()
    try:
        taken = cluster.ports[0]
        squatter.bind(("127.0.0.1", taken))
        squatter.listen()
        cluster.start()
        cluster.create()
        (port,) = cluster.ports
        assert port != taken
        assert cluster.ask(port, "CLUSTER INFO")["cluster_state"] == "ok"
    finally:
        squatter.close()
        cluster.close()
