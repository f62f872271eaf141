"""Calls of one script made in the same turn of the event loop, sent together.

A busy worker ends several executions in one turn (a take starts a batch at once, and
short handlers end together), and a busy API creates several; each is one script call.
Sent apart, each takes a connection of the pool, and Redis reads, parses and answers each
on a socket of its own: a read and a write (and a wake-up of its event loop) per call, on
Redis' one thread. Sent together they are one pipeline on one connection: one write, one
read, one reply. Each call is still a script call of its own, atomic and answered alone:
batching changes how calls travel, never what they do.

A call made while none is under way is sent at once, alone (a lone start waits for
nothing); the calls made while one is out gather and are sent together at the end of the
loop's turn, whether or not the first has been answered.

What happens on a bad day is what happens to a call sent alone: a pipeline whose
connection broke is retried by the client's policy like a command (`store.connect`); past
it, every call of the batch raises the error, as each would have alone (their scripts take
tokens where a resend must be recognised, `append.lua`). A Redis that lost its scripts
(restarted) answers NOSCRIPT to each call, which ran nothing: those are sent again after
the script is loaded. A caller cancelled before the batch is sent is left out of it.

On a Redis Cluster (`is_cluster`) calls are sent alone: its client sends a pipeline node
by node anyway.
"""

from __future__ import annotations

import asyncio
from typing import Any

from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

from majordomus.store.cluster import is_cluster, load_script

Call = tuple[list[Any], list[Any], "asyncio.Future[Any]"]


class BatchedScript:
    """`script(keys=..., args=...)`, with the calls of one loop turn sent as one pipeline."""

    def __init__(self, redis: Any, script: AsyncScript) -> None:
        self.redis = redis
        self.script = script
        self._alone = is_cluster(redis)
        self._pending: list[Call] = []
        self._in_flight = 0  # calls sent at once, not yet answered
        self._sending: set[asyncio.Task[None]] = set()

    async def __call__(self, keys: list[Any], args: list[Any]) -> Any:
        if self._alone:
            return await self.script(keys=keys, args=args)
        if not self._pending and not self._in_flight:
            # Nothing else under way: sent at once, without waiting for the turn to end (a
            # lone start is not delayed); calls made while it is out gather for the next.
            self._in_flight += 1
            try:
                return await self.script(keys=keys, args=args)
            finally:
                self._in_flight -= 1
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._pending.append((keys, args, future))
        if len(self._pending) == 1:
            loop.call_soon(self._flush)
        return await future

    def _flush(self) -> None:
        batch, self._pending = self._pending, []
        batch = [call for call in batch if not call[2].done()]
        if not batch:
            return
        task = asyncio.get_running_loop().create_task(self._send(batch))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send(self, batch: list[Call]) -> None:
        try:
            if len(batch) == 1:
                keys, args, _ = batch[0]
                answers: list[Any] = [await self.script(keys=keys, args=args)]
            else:
                answers = await self._pipeline(batch)
        except asyncio.CancelledError:  # the loop is closing: so are its callers
            for _, _, future in batch:
                future.cancel()
            raise
        except Exception as exc:  # every call of the batch fails as it would alone
            for _, _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        for (_, _, future), answer in zip(batch, answers, strict=True):
            if future.done():
                continue
            if isinstance(answer, Exception):
                future.set_exception(answer)
            else:
                future.set_result(answer)

    async def _pipeline(self, batch: list[Call]) -> list[Any]:
        answers = await self._send_all(batch)
        missing = [i for i, answer in enumerate(answers) if isinstance(answer, NoScriptError)]
        if missing:  # Redis lost its scripts: those calls ran nothing; load, send them again
            self.script.sha = await load_script(
                self.redis, self.script.script, [batch[i][0][0] for i in missing if batch[i][0]]
            )
            again = await self._send_all([batch[i] for i in missing])
            for i, answer in zip(missing, again, strict=True):
                answers[i] = answer
        return answers

    async def _send_all(self, batch: list[Call]) -> list[Any]:
        async with self.redis.pipeline(transaction=False) as pipe:
            for keys, args, _ in batch:
                pipe.execute_command("EVALSHA", self.script.sha, len(keys), *keys, *args)
            return list(await pipe.execute(raise_on_error=False))
