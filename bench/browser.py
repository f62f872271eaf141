"""The browser the console's benchmark and tests drive: the machine's Chromium (Debian's
`chromium`, or `MAJORDOMUS_TEST_CHROMIUM`), never a download, launched with the flags a
closed network needs (no background connections, no first-run work)."""

from __future__ import annotations

import os

CHROMIUM = os.environ.get("MAJORDOMUS_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
