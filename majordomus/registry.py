"""The capability registry: each capability declared once, every surface reading it.

`@capability(...)` records a handler with its typed input and output and its exposure (MCP
tool, HTTP route, CLI path). Absence is explicit: `None` means "not on this surface";
leaving an exposure out means "derive the default". The HTTP routes, OpenAPI operations,
MCP tools, CLI commands and JSON Schemas are all computed from these records, so nothing
about one capability is written twice. Conflicts (a second id, tool name, route or CLI
path) are refused when the declaration is made, i.e. at start-up.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal, TypeVar

from majordomus.client.handles import Declared
from majordomus.errors import not_found
from majordomus.flow import (
    Debounce,
    FlowError,
    PerKey,
    RateLimit,
    Throttle,
    check_collapse,
    check_per_key,
    check_rate_limit,
)
from majordomus.priorities import Priority
from majordomus.retries import Retry
from majordomus.schedules import Schedule
from majordomus.schemas import schema_of
from majordomus.search import SearchableError, check_searchable

Kind = Literal["query", "command"]
Stability = Literal["experimental", "stable", "deprecated"]
RunsIn = Literal["loop", "thread", "process"]
"""Where a handler runs on its worker: `loop` (an `async def` one, in the worker's event
loop), `thread` (a plain `def` one, in a daemon thread of the worker) or `process` (either,
in a child process of the worker, from a pool kept warm: `majordomus.children`)."""
TaskSupport = Literal["required", "optional", "forbidden"]
"""Whether its MCP tool may answer a call as a task (the `io.modelcontextprotocol/tasks`
extension): `optional`, when the caller declared the extension; `required`, only so (a
caller without it is refused); `forbidden`, never."""


class _Derived:
    def __repr__(self) -> str:
        return "DERIVED"


DERIVED: Any = _Derived()
"""Leave an exposure to its default: `majordomus_<module>_<name>`, `/api/v1/<module>/<name>`…"""


class RegistryError(ValueError):
    """A declaration that conflicts with another; raised at start-up."""


@dataclass(frozen=True)
class Exposure:
    mcp_tool: str | None
    http_method: str | None
    http_path: str | None
    cli_path: tuple[str, ...] | None


@dataclass(frozen=True)
class Capability:
    id: str
    kind: Kind
    title: str
    description: str
    input: type
    output: type
    handler: Callable[..., Any]
    stability: Stability = "experimental"
    cancellable: bool = False
    max_concurrency: int | None = None
    priority: Priority = "normal"
    """The priority of its executions when a start names none (`majordomus.priorities`)."""
    retry: Retry | None = None
    """Its retry policy (`majordomus.retries`); None: a failed execution is not retried."""
    schedules: tuple[Schedule, ...] = ()
    """Its declared schedules (`majordomus.schedules`), each started on its cron ticks."""
    timeout: float | None = None
    """Seconds an execution of it may run before it is asked to stop, then stopped, and
    failed `timed_out`; None: `MAJORDOMUS_DEFAULT_TIMEOUT` (an hour)."""
    runs_in: RunsIn = "loop"
    """Where its handler runs (`RunsIn`); derived when not declared: `loop` for an async
    handler, `thread` for a plain `def` one."""
    tags: tuple[str, ...] = ()
    exposure: Exposure = field(default_factory=lambda: Exposure(None, None, None, None))
    executable: bool = True
    """Whether `executions.start` may run it as an execution (control capabilities may not)."""
    task_support: TaskSupport = "optional"
    """Whether its MCP tool may answer a call as a task backed by an execution (derived when
    not declared: `optional` for a capability that runs as an execution, else `forbidden`)."""
    searchable: tuple[str, ...] = ()
    """The input members its executions may be found by (`majordomus.search`): each is
    indexed by value at creation, for `executions.list`'s `search`."""
    per_key: PerKey | None = None
    """At most so many of its executions run at once per value of an input member, fairly
    between values (`majordomus.flow`); None: no limit per key."""
    rate_limit: RateLimit | None = None
    """At most so many of its executions start per second, minute or hour, globally or per
    value of an input member (`majordomus.flow.RateLimit`); None: no rate limit."""
    collapse: Debounce | Throttle | None = None
    """Starts of one value of an input member within a window collapse into one execution,
    its last start's input once the key is quiet (`Debounce`) or its first's (`Throttle`)
    (`majordomus.flow`); None: every start is an execution of its own."""

    @property
    def module(self) -> str:
        return self.id.split(".", 1)[0]

    @property
    def name(self) -> str:
        return self.id.split(".", 1)[1]

    @property
    def input_schema(self) -> dict[str, Any]:
        return schema_of(self.input)

    @property
    def output_schema(self) -> dict[str, Any]:
        return schema_of(self.output)


def derive_exposure(
    cap_id: str, kind: Kind, mcp: Any, http: Any, cli: Any
) -> Exposure:
    module, name = cap_id.split(".", 1)
    if mcp is DERIVED:
        mcp = f"majordomus_{module}_{name}".replace(".", "_")
    if http is DERIVED:
        http = ("GET" if kind == "query" else "POST", f"/api/v1/{module}/{name}")
    if cli is DERIVED:
        cli = (module, name)
    method, path = (None, None) if http is None else (http[0].upper(), http[1])
    return Exposure(mcp, method, path, tuple(cli) if cli is not None else None)


def derive_runs_in(cap_id: str, handler: Callable[..., Any], executable: bool, declared: Any) -> RunsIn:
    """Where a handler runs: as declared, else in the loop when async and in a thread when
    plain. A process needs a handler its module names (a child imports it), and an
    execution (a capability that answers directly runs in its caller)."""
    is_async = inspect.iscoroutinefunction(handler)
    if declared is None:
        return "loop" if is_async else "thread"
    if declared not in ("loop", "thread", "process"):
        raise RegistryError(f"runs_in {declared!r} of {cap_id!r} is not loop, thread or process")
    if declared == "loop" and not is_async:
        raise RegistryError(
            f"{cap_id!r} has a plain def handler, which would block the loop: runs_in must be "
            "'thread' or 'process' (or make it async def)"
        )
    if declared == "thread" and is_async:
        raise RegistryError(f"{cap_id!r} has an async handler: runs_in must be 'loop' or 'process'")
    if declared == "process":
        if not executable:
            raise RegistryError(
                f"{cap_id!r} answers directly (executable=False), so it runs in its caller: "
                "runs_in='process' needs an execution"
            )
        if "<locals>" in handler.__qualname__ or handler.__module__ == "__main__":
            raise RegistryError(
                f"{cap_id!r} runs in a child process, which imports its handler by name: "
                f"declare it at the top level of an importable module (not in "
                f"{handler.__module__}.{handler.__qualname__})"
            )
    return declared  # type: ignore[no-any-return]


def derive_task_support(cap_id: str, executable: bool, declared: TaskSupport | None) -> TaskSupport:
    """A capability's task support: as declared, else `optional` when it runs as an execution
    and `forbidden` when it answers directly. Only an execution can back a task, so a
    capability that answers directly declaring otherwise is refused."""
    if declared is None:
        return "optional" if executable else "forbidden"
    if declared not in ("required", "optional", "forbidden"):
        raise RegistryError(
            f"task_support {declared!r} of {cap_id!r} is not required, optional or forbidden"
        )
    if declared != "forbidden" and not executable:
        raise RegistryError(
            f"{cap_id!r} answers directly (executable=False), so its tool cannot be a task: "
            "task_support must be 'forbidden' or left out"
        )
    return declared


class Registry:
    """Every capability this process knows, by id, in declaration order."""

    def __init__(self) -> None:
        self._by_id: dict[str, Capability] = {}

    def add(self, cap: Capability) -> Capability:
        if "." not in cap.id or cap.id.startswith(".") or cap.id.endswith("."):
            raise RegistryError(f"capability id {cap.id!r} must look like module.name")
        for other in self._by_id.values():
            self._refuse_conflict(cap, other)
        self._by_id[cap.id] = cap
        return cap

    @staticmethod
    def _refuse_conflict(cap: Capability, other: Capability) -> None:
        mine, theirs = cap.exposure, other.exposure
        if cap.id == other.id:
            raise RegistryError(f"capability {cap.id!r} is declared twice")
        if mine.mcp_tool and mine.mcp_tool == theirs.mcp_tool:
            raise RegistryError(
                f"MCP tool {mine.mcp_tool!r} of {cap.id!r} is already {other.id!r}'s"
            )
        if mine.http_path and (mine.http_method, mine.http_path) == (
            theirs.http_method,
            theirs.http_path,
        ):
            raise RegistryError(
                f"route {mine.http_method} {mine.http_path} of {cap.id!r} is already {other.id!r}'s"
            )
        if mine.cli_path and mine.cli_path == theirs.cli_path:
            raise RegistryError(
                f"command 'majordomus {' '.join(mine.cli_path)}' of {cap.id!r} "
                f"is already {other.id!r}'s"
            )

    def get(self, cap_id: str) -> Capability | None:
        return self._by_id.get(cap_id)

    def require(self, cap_id: str) -> Capability:
        cap = self._by_id.get(cap_id)
        if cap is None:
            raise not_found(
                f"there is no capability {cap_id!r}",
                "list them with GET /api/v1/capabilities or 'majordomus capabilities list'; a "
                "capability of your own is loaded by naming its module in MAJORDOMUS_CAPABILITIES",
            )
        return cap

    def by_tool(self, tool: str) -> Capability | None:
        return next((c for c in self if c.exposure.mcp_tool == tool), None)

    def route_of(self, cap_id: str) -> str:
        path = self.require(cap_id).exposure.http_path
        return path or ""

    def __iter__(self) -> Iterator[Capability]:
        return iter(list(self._by_id.values()))

    def __len__(self) -> int:
        return len(self._by_id)

    def __contains__(self, cap_id: object) -> bool:
        return cap_id in self._by_id


In = TypeVar("In")
Out = TypeVar("Out")

REGISTRY = Registry()
"""The process's registry: the built-ins and every module of `MAJORDOMUS_CAPABILITIES`,
filled by `majordomus.loading.load_capabilities`."""


def capability(
    id: str,
    *,
    input: type[In],
    output: type[Out],
    kind: Kind = "command",
    title: str | None = None,
    description: str | None = None,
    stability: Stability = "experimental",
    cancellable: bool = False,
    max_concurrency: int | None = None,
    priority: Priority = "normal",
    retry: Retry | None = None,
    schedules: tuple[Schedule, ...] | list[Schedule] = (),
    timeout: float | timedelta | None = None,
    runs_in: RunsIn | None = None,
    tags: tuple[str, ...] = (),
    mcp: str | None = DERIVED,
    http: tuple[str, str] | None = DERIVED,
    cli: tuple[str, ...] | None = DERIVED,
    executable: bool = True,
    task_support: TaskSupport | None = None,
    searchable: tuple[str, ...] | list[str] = (),
    per_key: PerKey | None = None,
    rate_limit: RateLimit | None = None,
    collapse: Debounce | Throttle | None = None,
    registry: Registry | None = None,
) -> Callable[[Callable[..., Any]], Declared[In, Out]]:
    """Declare a capability: `@capability("myapp.resize", input=In, output=Out)`.

    Hands back a `Declared[In, Out]`: still callable as the handler, and typed ways to run
    it as an execution on a client (`start`, `call`; `majordomus.client.handles`)."""

    def declare(handler: Callable[..., Any]) -> Declared[In, Out]:
        doc = (handler.__doc__ or "").strip()
        tasks = derive_task_support(id, executable, task_support)
        seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
        if seconds is not None and not seconds > 0:
            raise RegistryError(f"timeout {timeout!r} of {id!r} is not a positive duration")
        try:
            found_by = check_searchable(id, input, tuple(searchable))
        except SearchableError as exc:
            raise RegistryError(str(exc)) from exc
        try:
            keyed = check_per_key(id, input, per_key)
            rated = check_rate_limit(id, input, rate_limit, keyed)
            keyed_by = (keyed.member if keyed else None, rated.key if rated else None)
            collapsed = check_collapse(id, input, collapse, tuple(m for m in keyed_by if m))
        except FlowError as exc:
            raise RegistryError(str(exc)) from exc
        cap = Capability(
            id=id,
            kind=kind,
            title=title or (doc.splitlines()[0] if doc else id),
            description=description or doc or id,
            input=input,
            output=output,
            handler=handler,
            stability=stability,
            cancellable=cancellable,
            max_concurrency=max_concurrency,
            priority=priority,
            retry=retry,
            schedules=tuple(schedules),
            timeout=float(seconds) if seconds is not None else None,
            runs_in=derive_runs_in(id, handler, executable, runs_in),
            tags=tuple(tags),
            exposure=derive_exposure(id, kind, mcp, http, cli),
            executable=executable,
            task_support=tasks,
            searchable=found_by,
            per_key=keyed,
            rate_limit=rated,
            collapse=collapsed,
        )
        (registry if registry is not None else REGISTRY).add(cap)
        return Declared(cap, handler)

    return declare
