"""An MCP client as a process of its own: attach to an episode, print the answer, then go.

`python -m tests.mcp.client_process URL EXTERNAL_ID MODE THEN`: MODE is the `mcp.Client`
mode (`auto` or `legacy`); THEN is `exit` (leave normally, without detaching) or `hold`
(keep the connection open, saying nothing, until the process is killed).
"""

from __future__ import annotations

import json
import sys

import anyio
from mcp import Client


async def main(url: str, external_id: str, mode: str, then: str) -> None:
    async with Client(url, mode=mode) as client:  # type: ignore[arg-type]
        result = await client.call_tool("majordomus_session_attach", {"external_id": external_id})
        answer = {"protocol_version": client.protocol_version, **(result.structured_content or {})}
        print(json.dumps(answer), flush=True)
        if then == "hold":
            await anyio.sleep_forever()


if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:5])
