"""majordomus: capabilities declared once, run as executions anyone can watch.

The public surface for people declaring capabilities: `capability`, `Context`,
`ExecutionCancelled`, `MajordomusError`, `Secret`. Everything else is reached through
the surfaces (HTTP, SSE, MCP, CLI) or the engine.
"""

from majordomus.context import Context, ExecutionCancelled
from majordomus.errors import MajordomusError
from majordomus.registry import capability
from majordomus.schemas import Secret

__all__ = ["Context", "ExecutionCancelled", "MajordomusError", "Secret", "capability"]
__version__ = "0.1.0"
