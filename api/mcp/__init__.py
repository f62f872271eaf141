"""The MCP surface: the registry as MCP tools and resources, over Streamable HTTP and stdio.

- `api.mcp.server`: `McpSurface`, the tools and resources projected from the registry,
  each call dispatched through the engine as actor `mcp`;
- `api.mcp.results`: what a call answers as MCP results (output, failure, still going);
- `api.mcp.episodes`: which connection holds which episode on this replica, and the
  keeper that renews and detaches them;
- `api.mcp.tasks`: the tasks extension (`io.modelcontextprotocol/tasks`): a long call as
  a durable execution, `tasks/get`, `tasks/cancel`, `tasks/update`, and who owns a task;
- `api.mcp.task_listen`: `subscriptions/listen` with `taskIds`, pushed from the shared feed;
- `api.mcp.tasks_2025`: the same tasks in the 2025-11-25 shape, for handshake sessions;
- `api.mcp.sdk`: the SDK's private attributes read (in this one place) and the extension
  applied to the low-level server;
- `api.mcp.mount`: `build_mcp`, the Streamable HTTP app the API mounts at `/mcp`, with its
  Host and Origin checks;
- `api.mcp.stdio`: `run_stdio`, `majordomus mcp`.
"""

from majordomus.api.mcp.mount import McpMount, build_mcp, transport_security
from majordomus.api.mcp.server import McpSurface
from majordomus.api.mcp.stdio import run_stdio

__all__ = ["McpMount", "McpSurface", "build_mcp", "run_stdio", "transport_security"]
