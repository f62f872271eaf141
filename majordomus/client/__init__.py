"""Start, follow and read executions from Python code.

- `majordomus.client.client`: `Client`, asyncio, on Redis or through the HTTP API;
- `majordomus.client.sync`: `SyncClient`, its synchronous twin;
- `majordomus.client.handles`: what a start answers (`Execution`, `SyncExecution`), what
  `@capability` hands back (`Declared`), and `Pending`;
- `majordomus.client.transports`: the two transports both clients (and the CLI) use.

The names are also exported by `majordomus` itself (`majordomus.Client`...). Each is
imported when first asked for, so declaring a capability (which makes a `Declared`) loads
neither a client nor its transports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from majordomus.exports import lazy_exports

if TYPE_CHECKING:
    from majordomus.client.client import Client
    from majordomus.client.handles import Declared, Execution, Pending, SyncExecution
    from majordomus.client.sync import SyncClient

_HOME = {
    "Client": "majordomus.client.client",
    "SyncClient": "majordomus.client.sync",
    "Declared": "majordomus.client.handles",
    "Execution": "majordomus.client.handles",
    "Pending": "majordomus.client.handles",
    "SyncExecution": "majordomus.client.handles",
}


__getattr__ = lazy_exports(globals(), _HOME)


__all__ = ["Client", "Declared", "Execution", "Pending", "SyncClient", "SyncExecution"]
