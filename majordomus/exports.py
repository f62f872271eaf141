"""Names a package exports but imports only when first asked for.

`majordomus`, `majordomus.client` and `majordomus.testing` each export names whose modules
are heavy (the handler context and the Redis client, the transports, the workers): a
package's `__getattr__` made here imports a name's module at its first use and keeps the
value, so importing the package (as `majordomus --help` and every pytest run do) loads
none of them.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any


def lazy_exports(namespace: dict[str, Any], homes: dict[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` for `namespace` (a package's `globals()`): each name of
    `homes` is imported from the module it names when first asked for, then kept."""
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(home), name)
        namespace[name] = value
        return value

    return __getattr__
