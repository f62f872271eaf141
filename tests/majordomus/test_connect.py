"""The client every process uses keeps a caller's cancel: a loop of Redis commands stopped at
any moment of its round trips ends at the first cancel (redis-py 5.3's writes, bounded by
`asyncio.wait_for`, drop it on Python 3.11; `majordomus.store.connect` writes otherwise)."""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import random

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
from majordomus.store.connect import STURDY, connect

REDIS_SEND_PACKED_COMMAND = "cad238c0be555d05"  # redis-py 5.3.1


def test_the_redis_py_write_we_replace_is_the_one_we_read() -> None:
    source = inspect.getsource(AbstractConnection.send_packed_command)
    assert hashlib.sha256(source.encode()).hexdigest()[:16] == REDIS_SEND_PACKED_COMMAND, (
        "redis-py changed send_packed_command: re-read it against majordomus/store/connect.py"
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
            conn._writer.transport.abort()  # the peer's reset, as the fault proxy cuts
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
