"""The client every process uses keeps a caller's cancel: a loop of Redis commands stopped at
any moment of its round trips ends at the first cancel (redis-py 5.3's writes, bounded by
`asyncio.wait_for`, drop it on Python 3.11; `majordomus.store.connection` writes otherwise)."""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import random
from typing import Any

import pytest
from redis.asyncio.connection import (
    AbstractConnection,
    Connection,
    SSLConnection,
    UnixDomainSocketConnection,
)

from majordomus.config import shown_url
from majordomus.engine import Engine
from majordomus.loops import stop_task
from majordomus.store.connect import connect
from majordomus.store.connection import STURDY
from majordomus.store.redis_internals import stream_writer

REDIS_SEND_PACKED_COMMAND = "cad238c0be555d05"  # redis-py 5.3.1


def test_the_redis_py_write_we_replace_is_the_one_we_read() -> None:
    source = inspect.getsource(AbstractConnection.send_packed_command)
    assert hashlib.sha256(source.encode()).hexdigest()[:16] == REDIS_SEND_PACKED_COMMAND, (
        "redis-py changed send_packed_command: re-read it against majordomus/store/connection.py"
    )


@pytest.mark.parametrize(
    ("url", "theirs"),
    [
        ("redis://127.0.0.1:6379/0", Connection),
        ("rediss://127.0.0.1:6380/0", SSLConnection),
        ("unix:///tmp/redis.sock?db=0", UnixDomainSocketConnection),
    ],
)
def test_every_url_scheme_gets_the_sturdy_connection(url: str, theirs: type) -> None:
    pool_class = connect(url).connection_pool.connection_class
    assert pool_class is STURDY[theirs] and issubclass(pool_class, theirs)


async def test_a_loop_of_commands_cancelled_at_any_moment_ends_at_the_first_cancel(
    engine: Engine,
) -> None:
    """The MCP episode keeper's own calls (a pipelined renewal, then the reaper), cancelled
    once at a random moment of their round trips, 300 times: every one ends."""
    rng = random.Random(7)

    async def keeper() -> None:
        while True:
            await engine.episodes.keep_held([("cancel-probe", "holder")])
            await engine.episodes.reap()

    lost = 0
    for _ in range(300):
        task = asyncio.create_task(keeper())
        await asyncio.sleep(rng.uniform(0, 0.003))
        task.cancel()
        await asyncio.wait([task], timeout=1)
        if not task.done():
            lost += 1
            await stop_task(task)  # cancels again until it ends
    assert lost == 0, f"{lost} of 300 cancels were lost"


def test_a_write_to_a_transport_the_peer_closed_is_a_connection_error_on_uvloop(
    redis_url: str,
) -> None:
    """uvloop refuses a write to a closed transport with a RuntimeError (asyncio's drops it
    or raises an OSError): the client makes it the ConnectionError every caller treats as
    Redis away and retries, never a refusal that would give a batch of reports up."""
    import uvloop
    from redis.exceptions import ConnectionError as RedisConnectionError

    async def body() -> None:
        client = connect(redis_url)
        try:
            conn = await client.connection_pool.get_connection()
            stream_writer(conn).transport.abort()  # the peer's reset, as the fault proxy cuts
            await asyncio.sleep(0)
            with pytest.raises(RedisConnectionError, match="while writing to socket"):
                await conn.send_packed_command(conn.pack_command("PING"), check_health=False)
            await client.connection_pool.release(conn)
            assert await client.ping()  # and the client goes on, on a new connection
        finally:
            await client.aclose()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(body())


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:pw@h:1/0", "redis://:***@h:1/0"),
        ("redis://u:p@ss@h:1/0?x=1", "redis://u:***@h:1/0?x=1"),
        ("redis+cluster://u:pw@h1:7000,h2:7001", "redis+cluster://u:***@h1:7000,h2:7001"),
        ("redis://:pw@[::1]:6379/0", "redis://:***@[::1]:6379/0"),
        ("redis://h:1/0", "redis://h:1/0"),
        ("redis://user@h", "redis://user@h"),
        (
            "redis+sentinel://:pw@s1:26379,s2/main?sentinel_password=spw&x=1",
            "redis+sentinel://:***@s1:26379,s2/main?sentinel_password=***&x=1",
        ),
    ],
)
def test_a_shown_url_hides_its_password_and_keeps_every_host(url: str, shown: str) -> None:
    assert shown_url(url) == shown


async def test_a_connection_the_server_closed_is_never_handed_out_broken(
    redis: Any, redis_url: str
) -> None:
    """The pool hands out a quiet connection without redis-py's zero-timeout read: one the
    server closed (here by CLIENT KILL, as a restart or an idle timeout would) is replaced,
    whether or not the loop has read the close yet; the command runs once, on a new one."""
    client = connect(redis_url)
    try:
        for settle in (0.0, 0.05):  # the close not yet read, then read
            await client.set("quick-pool", "1")
            conn = await client.connection_pool.get_connection()
            conn_id = await _client_id(conn)
            await client.connection_pool.release(conn)
            await redis.execute_command("CLIENT", "KILL", "ID", conn_id)
            await asyncio.sleep(settle)
            assert await client.incr("quick-pool") == 2
    finally:
        await client.aclose()


async def _client_id(conn: Any) -> int:
    await conn.send_command("CLIENT", "ID")
    return int(await conn.read_response())


async def test_an_unread_answer_on_a_pooled_connection_is_never_taken_for_the_next(
    redis: Any, redis_url: str
) -> None:
    """A connection handed back with an answer left unread (no code path of ours does it)
    is checked as redis-py checks it once the bytes are in: the next command gets its own
    answer, never the stale one."""
    client = connect(redis_url)
    try:
        await client.set("quick-pool", "mine")
        conn = await client.connection_pool.get_connection()
        await conn.send_command("PING")  # its PONG is never read
        await client.connection_pool.release(conn)
        await asyncio.sleep(0.05)  # the PONG arrives in the connection's buffer
        assert await client.get("quick-pool") == b"mine"
    finally:
        await client.aclose()


async def test_a_full_pool_serves_its_waiters_while_free_connections_are_taken_quickly(
    redis_url: str,
) -> None:
    """Two connections, sixty concurrent commands: the waiters are served (the quick path
    takes a free connection only when nobody waits), none times out."""
    client = connect(redis_url, max_connections=2)
    try:
        answers = await asyncio.gather(*(client.echo(f"m{i}") for i in range(60)))
        assert answers == [f"m{i}".encode() for i in range(60)]
        assert len(client.connection_pool._in_use_connections) == 0
    finally:
        await client.aclose()
