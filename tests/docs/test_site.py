"""The documentation site: `mkdocs build --strict` as CI and a writer run it (a broken link,
an anchor that is not there, a page out of the nav, a docstring mkdocstrings cannot read
fail it), and the reference pages' generated parts read in the built pages: every setting,
every capability with each surface that reaches it, every CLI command, every MCP tool.
Nothing in the site is fetched from elsewhere when it is viewed (no web fonts, no CDN)."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from majordomus.config import ENV_PREFIX, Settings
from majordomus.loading import load_capabilities
from tests.conftest import ROOT

pytestmark = [pytest.mark.process, pytest.mark.slow]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAJORDOMUS_")}
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env={**env, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    assert "WARNING" not in built.stderr, built.stderr
    return out


def page_text(site: Path, page: str) -> str:
    """A built page's text, tags dropped (so `<code>x</code>` reads `x`)."""
    raw = (site / page / "index.html").read_text()
    return html.unescape(re.sub(r"<[^>]+>", "", raw))


def test_the_settings_page_has_every_setting(site: Path) -> None:
    text = page_text(site, "reference/settings")
    for name in Settings.__struct_fields__:
        assert f"{ENV_PREFIX}{name.upper()}" in text, name
    assert "<!-- generated" not in (site / "reference/settings/index.html").read_text()


def test_the_capabilities_page_has_every_capability_and_its_surfaces(site: Path) -> None:
    text = page_text(site, "reference/capabilities")
    cli = page_text(site, "reference/cli")
    mcp = page_text(site, "reference/mcp")
    http = page_text(site, "reference/http")
    builtins = [c for c in load_capabilities([]) if c.handler.__module__.startswith("majordomus.")]
    assert len(builtins) > 20
    for cap in builtins:
        assert cap.id in text and cap.title in text, cap.id
        exposure = cap.exposure
        if exposure.http_path:
            assert f"{exposure.http_method} {exposure.http_path}" in text, cap.id
            assert exposure.http_path in http, cap.id
        if exposure.mcp_tool:
            assert exposure.mcp_tool in text and exposure.mcp_tool in mcp, cap.id
        if exposure.cli_path:
            assert f"majordomus {' '.join(exposure.cli_path)}" in cli, cap.id
    for process in ("serve", "worker", "dev", "mcp", "run", "follow"):
        assert f"Usage: majordomus {process} " in cli, process


def test_the_python_api_is_read_from_its_docstrings(site: Path) -> None:
    text = page_text(site, "reference/python")
    for name in ("Client", "SyncClient", "capability", "Environment"):
        assert re.search(rf"\b{name}\b", text), name
    # A method's docstring, as the code has it.
    from majordomus import Client

    first_line = (Client.start.__doc__ or "").strip().splitlines()[0].replace("`", "")
    assert first_line and first_line in " ".join(text.split())


def test_nothing_is_fetched_from_elsewhere_when_a_page_is_viewed(site: Path) -> None:
    fetched = re.compile(r"""<(?:script|link|img)[^>]+(?:src|href)=["']https?://""")
    for page in site.rglob("*.html"):
        raw = page.read_text()
        assert not fetched.search(raw), page
        assert "fonts.googleapis" not in raw and "fonts.gstatic" not in raw, page
