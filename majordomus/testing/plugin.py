"""The testing kit's pytest plugin: installing majordomus gives every suite its fixture.

Registered as a `pytest11` entry point, so pytest loads it in every run of every suite that
has majordomus installed: this module imports nothing of majordomus until a test asks for
its fixture, and says nothing unless a suite configures or uses it.

- `majordomus_env`: an open `majordomus.testing.Environment` for the test (async: with
  pytest-asyncio, or anyio's plugin), closed after it. What it runs is taken from, first to
  last: the test's marker `@pytest.mark.majordomus("greetings", redis="fake", workers=1,
  settle_seconds=0.5, lease_seconds=5, ...)` (positional arguments are capability
  modules, or one `Registry`; other keywords are `Settings` fields); the ini options
  `majordomus_capabilities` (module names) and `majordomus_redis` (`fake`, `embedded` or a
  URL); the variable `MAJORDOMUS_CAPABILITIES`. The default Redis is in-process fakeredis,
  where time can be skipped (`await majordomus_env.skip(hours=1)`).
- The header names the kit's capabilities and Redis when the ini options or the variable
  configure it; the summary says which Redis its environments ran on when a test used it.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any

import pytest

INI_CAPABILITIES = "majordomus_capabilities"
INI_REDIS = "majordomus_redis"
MARKER = "majordomus"
VARIABLE = "MAJORDOMUS_CAPABILITIES"

_USED = pytest.StashKey[list[str]]()


def _async_fixture() -> Any:
    """pytest-asyncio's fixture decorator where it is installed (its strict mode needs it),
    else pytest's own (anyio's plugin runs async fixtures of its tests)."""
    try:
        import pytest_asyncio
    except ImportError:
        return pytest.fixture
    return pytest_asyncio.fixture


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        INI_CAPABILITIES,
        "modules whose capabilities majordomus_env runs (as MAJORDOMUS_CAPABILITIES names them)",
        type="args",
        default=[],
    )
    parser.addini(
        INI_REDIS,
        "the Redis majordomus_env runs on: fake (in-process fakeredis, time can be skipped; "
        "the default), embedded (a real server per test) or a Redis URL",
        default="",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(*capabilities, redis='fake', workers=1, settle_seconds=0.5, **settings): "
        "what the majordomus_env fixture runs (majordomus.testing)",
    )
    config.stash[_USED] = []


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    capabilities, where = _configured(config)
    if not capabilities and not where:
        return None
    return [
        f"majordomus.testing: {', '.join(capabilities) or 'the built-ins'}, on "
        f"{_described(where or 'fake')}"
    ]


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    used = config.stash.get(_USED, [])
    if not used:
        return
    kinds = sorted(set(used))
    terminalreporter.write_line(
        f"majordomus.testing: {len(used)} environment{'s' if len(used) != 1 else ''} on "
        + "; ".join(kinds)
    )


@_async_fixture()
async def majordomus_env(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """An open `majordomus.testing.Environment` (see the module for what it runs)."""
    try:
        from majordomus.testing.environment import Environment
    except ImportError as exc:  # a lean install: no workers, arq, fakeredis
        raise pytest.UsageError(
            f"majordomus_env needs majordomus's workers ({exc}): pip install 'majordomus[server]'"
        ) from None
    capabilities, options = _options(request)
    async with Environment(capabilities, **options) as env:
        request.config.stash.setdefault(_USED, []).append(env.redis_description)
        yield env


def _options(request: pytest.FixtureRequest) -> tuple[Any, dict[str, Any]]:
    """The capabilities and the `Environment` keywords for this test."""
    configured, where = _configured(request.config)
    options: dict[str, Any] = {"redis": where or "fake"}
    capabilities: Any = configured
    marker = request.node.get_closest_marker(MARKER)
    if marker is not None:
        if marker.args:
            first = marker.args[0]
            capabilities = first if len(marker.args) == 1 and not isinstance(first, str) else list(marker.args)
        options.update(marker.kwargs)
        capabilities = options.pop("capabilities", capabilities)
    return capabilities, options


def _configured(config: pytest.Config) -> tuple[list[str], str]:
    """The capability modules and the Redis the ini options (else the variable) name."""
    modules = [str(m) for m in config.getini(INI_CAPABILITIES)]
    if not modules:
        modules = [m.strip() for m in os.environ.get(VARIABLE, "").split(",") if m.strip()]
    return modules, str(config.getini(INI_REDIS) or "").strip()


def _described(where: str) -> str:
    if where == "fake":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return f"in-process fakeredis {version('fakeredis')} (time can be skipped)"
        except PackageNotFoundError:
            return "in-process fakeredis (not installed: pip install 'majordomus[server]')"
    if where == "embedded":
        return "an embedded Redis server started for each test (real time)"
    from majordomus.config import shown_url

    return f"{shown_url(where)} (real time)"
