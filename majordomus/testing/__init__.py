"""The testing kit: a user's capabilities run by the real engine and workers, in the test.

    from majordomus.testing import Environment

    async def test_a_report_is_sent_the_next_morning():
        async with Environment(["reports"]) as env:
            started = await env.engine.start("reports.daily", {"kind": "sales"})
            await env.skip(hours=24)
            assert (await env.engine.get(started.id)).state == "succeeded"

- `majordomus.testing.environment`: `Environment`, the engine, a sweeper and in-process
  workers on a Redis of their own (in-process fakeredis by default; the embedded server or
  a URL on request), with `skip` (time skipping, fakeredis only), `kill_worker`,
  `start_worker`, `stop_worker`;
- `majordomus.testing.clock`: the virtual clock a skip moves;
- `majordomus.testing.skipping`: how a skip moves it, stopping wherever something is due;
- `majordomus.testing.workers`: the workers run in the test's process, and killed there;
- `majordomus.testing.servers`: the Redis it runs on;
- `majordomus.testing.plugin`: the pytest plugin (installed with majordomus: the
  `majordomus_env` fixture, the `majordomus` marker, the `majordomus_capabilities` and
  `majordomus_redis` ini options).

Importing this package loads nothing else: `Environment` is imported when first asked for
(the pytest plugin imports this package in every run of every suite). It needs
`majordomus[server]` (the workers, arq, fakeredis).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from majordomus.exports import lazy_exports

if TYPE_CHECKING:
    from majordomus.testing.clock import VirtualClock
    from majordomus.testing.environment import Environment
    from majordomus.testing.workers import InProcessWorker

_HOME = {
    "Environment": "majordomus.testing.environment",
    "InProcessWorker": "majordomus.testing.workers",
    "VirtualClock": "majordomus.testing.clock",
}


__getattr__ = lazy_exports(globals(), _HOME)


__all__ = ["Environment", "InProcessWorker", "VirtualClock"]
