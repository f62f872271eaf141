"""The fence around redis-py's private names (`majordomus.store.redis_internals`): each
function does what it says on the redis-py installed, so an upgrade that moves a name or
changes its meaning fails here; and no other module of the store reaches past the fence."""

from __future__ import annotations

import ast
import asyncio
import functools
import inspect
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import BlockingConnectionPool
from redis.asyncio.cluster import ClusterPipeline, RedisCluster
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.sentinel import SentinelConnectionPool
from redis.exceptions import RedisClusterException

from majordomus.store import cluster as cluster_module
from majordomus.store import connection as connection_module
from majordomus.store import sentinel as sentinel_module
from majordomus.store.connect import connect
from majordomus.store.redis_internals import (
    ask_layout_again,
    connect_error_message,
    heard_nothing,
    layout_due,
    layout_lock,
    open_socket,
    pipeline_cluster,
    queue_again,
    queued_commands,
    stream_writer,
    take_free_connection,
)

STORE = Path(cluster_module.__file__).parent
FENCE = "redis_internals.py"


async def test_open_socket_connects_without_the_handshake(redis: Any, redis_url: str) -> None:
    client = connect(redis_url, name="fence-probe")
    conn = client.connection_pool.make_connection()
    try:
        await open_socket(conn)
        assert conn.is_connected
        # No handshake yet: the server has the connection, without its name.
        assert b"name=fence-probe " not in await redis.execute_command("CLIENT", "LIST")
        await conn.on_connect()
        assert b"name=fence-probe " in await redis.execute_command("CLIENT", "LIST")
    finally:
        await conn.disconnect()
        await client.aclose()


def test_connect_error_message_words_a_failed_connect_as_redis_py_does() -> None:
    conn = connect("redis://127.0.0.1:1/0").connection_pool.make_connection()
    words = connect_error_message(conn, ConnectionRefusedError(111, "Connect call failed"))
    assert "127.0.0.1:1" in words and "Connect call failed" in words


async def test_stream_writer_is_the_connections_own(redis_url: str) -> None:
    client = connect(redis_url)
    try:
        conn = await client.connection_pool.get_connection()
        writer = stream_writer(conn)
        assert isinstance(writer, asyncio.StreamWriter)
        writer.write(b"*1\r\n$4\r\nPING\r\n")
        await writer.drain()
        assert await conn.read_response() == b"PONG"
        await client.connection_pool.release(conn)
    finally:
        await client.aclose()


async def test_heard_nothing_tells_a_quiet_connection_from_one_with_unread_bytes(
    redis_url: str,
) -> None:
    client = connect(redis_url)
    try:
        conn = await client.connection_pool.get_connection()
        await conn.send_command("PING")
        assert await conn.read_response() == b"PONG"
        assert heard_nothing(conn)  # connected, everything read
        await conn.send_command("PING")  # its answer left unread
        for _ in range(200):  # until the loop has taken the bytes off the socket
            await asyncio.sleep(0.005)
            if not heard_nothing(conn):
                break
        assert not heard_nothing(conn)
        await conn.read_response()
        assert heard_nothing(conn)
        await conn.disconnect()
        assert not heard_nothing(conn)  # not connected
        await client.connection_pool.release(conn)
    finally:
        await client.aclose()


async def test_take_free_connection_takes_one_only_when_nobody_waits(redis_url: str) -> None:
    pool = BlockingConnectionPool.from_url(redis_url, max_connections=1, timeout=2)
    try:
        assert take_free_connection(pool) is None  # nothing free yet
        conn = await pool.get_connection()
        await pool.release(conn)
        taken = take_free_connection(pool)
        assert taken is conn and conn in pool._in_use_connections  # noqa: SLF001
        waiter = asyncio.create_task(pool.get_connection())
        await asyncio.sleep(0.01)  # it waits for the one connection
        await pool.release(conn)
        assert take_free_connection(pool) is None  # the waiter's turn, not ours
        assert await asyncio.wait_for(waiter, 2) is conn
        await pool.release(conn)
    finally:
        await pool.disconnect()


def test_a_cluster_clients_layout_is_due_when_new_and_when_asked_again() -> None:
    cluster = RedisCluster(host="127.0.0.1", port=1)
    assert layout_due(cluster)  # new: asks at its first command
    cluster._initialize = False  # noqa: SLF001  as after a layout was had
    assert not layout_due(cluster)
    ask_layout_again(cluster)
    assert layout_due(cluster)


async def test_layout_lock_is_the_lock_redis_py_holds_while_asking() -> None:
    cluster = RedisCluster(host="127.0.0.1", port=1)
    lock = layout_lock(cluster)
    assert lock is layout_lock(cluster) and lock is cluster._lock  # noqa: SLF001
    async with lock:
        # redis-py's `initialize` waits on the same lock: it does not get past it.
        asking = asyncio.create_task(cluster.initialize())
        await asyncio.sleep(0.05)  # time passes: it stays behind the lock
        assert not asking.done()
    with pytest.raises(RedisClusterException, match="cannot be connected"):
        await asyncio.wait_for(asking, 10)  # then asks port 1, which refuses


def test_a_pipelines_queue_can_be_read_and_queued_again() -> None:
    cluster = RedisCluster(host="127.0.0.1", port=1)
    pipe = ClusterPipeline(cluster)
    pipe.set("a", 1)
    pipe.get("a")
    queued = queued_commands(pipe)
    assert [command.args[0] for command in queued] == ["SET", "GET"]
    queue_again(pipe, [])
    assert queued_commands(pipe) == []
    queue_again(pipe, queued)
    assert [command.args[0] for command in queued_commands(pipe)] == ["SET", "GET"]
    assert pipeline_cluster(pipe) is cluster


def _redis_private_uses_of(path: Path) -> list[str]:
    """`x._name` in `path` where `x` is not `self`/`cls` and `_name` is not the module's own
    (a method, a class or an attribute it sets), and `self._name` where `_name` is redis-py's (named in the source of the redis-py class
    one of our classes in `path` derives from)."""
    tree = ast.parse(path.read_text())
    module: Any = {
        "cluster.py": cluster_module,
        "connection.py": connection_module,
        "sentinel.py": sentinel_module,
    }.get(path.name)
    theirs: set[str] = set()
    if module is not None:
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__:  # a class of ours, not one imported
                for base in cls.__mro__[1:]:
                    if base.__module__.startswith("redis."):
                        theirs |= _private_attributes_of(base)
    ours = {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    } | {
        target.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign | ast.AnnAssign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Attribute)
    }
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and node.attr.startswith("_")):
            continue
        if node.attr.startswith("__"):
            continue
        owner = node.value
        mine = isinstance(owner, ast.Name) and owner.id in ("self", "cls")
        if node.attr in theirs or not (mine or node.attr in ours):
            found.append(f"{path.name}:{node.lineno} .{node.attr}")
    return found


def _private_attributes_of(cls: type) -> frozenset[str]:
    """The private names redis-py's module of `cls` uses on `self` (its classes', a superset
    of `cls`'s: a name any of them uses is redis-py's to change)."""
    return _private_attributes_in(inspect.getfile(cls))


@functools.cache
def _private_attributes_in(path: str) -> frozenset[str]:
    return frozenset(_private_attributes(Path(path).read_text()))


def _private_attributes(source: str) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            if isinstance(node.value, ast.Name) and node.value.id == "self":
                names.add(node.attr)
    return names


def test_no_module_of_the_store_reaches_past_the_fence() -> None:
    found = []
    for path in sorted(STORE.glob("*.py")):
        if path.name != FENCE:
            found += _redis_private_uses_of(path)
    assert found == [], (
        "private names of another library outside majordomus/store/redis_internals.py: "
        f"{found} (read them through the fence, with a test there)"
    )


def test_the_scan_finds_what_it_looks_for() -> None:
    """The scan above is no test that passes on anything: it finds redis-py's names used
    on `self` in a class deriving from redis-py, and a private name of another object."""
    assert "_initialize" in _private_attributes(inspect.getsource(RedisCluster))
    assert "_available_connections" in _private_attributes(
        inspect.getsource(BlockingConnectionPool.__mro__[1])
    )
    assert "_writer" in _private_attributes(inspect.getsource(AbstractConnection))
    assert SentinelConnectionPool.__module__.startswith("redis.")
    uses = _redis_private_uses_of(STORE / FENCE)
    assert any(".open_socket" not in use and "._connect" in use for use in uses)
