"""Filling the process's registry: the built-ins first, then each module the user names.

The built-ins (`majordomus.builtins`) are imported here exactly as a user's module is,
so the registry itself imports no capability and declaring one never goes in a circle.
"""

from __future__ import annotations

import importlib

from majordomus.builtins import MODULES as BUILTIN_MODULES
from majordomus.registry import REGISTRY, Registry


def load_capabilities(modules: list[str]) -> Registry:
    """Import the built-ins and each user module; a bad module name stops start-up clearly."""
    for name in BUILTIN_MODULES:
        importlib.import_module(name)
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise SystemExit(
                f"majordomus: cannot load capabilities from {name!r} ({exc}); "
                "check MAJORDOMUS_CAPABILITIES"
            ) from None
    return REGISTRY
