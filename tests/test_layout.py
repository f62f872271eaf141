"""The layout's rules, read from the source: Redis only in the store, dependencies one way.

These are lint rules kept as tests, so a change that breaks the architecture fails the
suite with the module and line that did it:

- nothing outside `majordomus/store/` imports the Redis client (`redis`, `fakeredis`) or
  calls a Redis command on anything, but the launchers of local servers
  (`majordomus/local/`), which set up the servers they start (a cluster's slots, a
  sentinel's watch) and import no surface (a method named like a Redis command that no dict,
  list, set or str has; `pipeline`, `pubsub`, `register_script`, `execute_command`);
- nothing in the core (`majordomus/` but its `cli/` surface) imports `api`, `workers` or
  the CLI; only `majordomus/store/` knows arq's key names and job format;
- the store imports none of the layers above it (engine, context, registry, built-ins),
  stands only on modules that never reach it, and starts no process: the launchers of
  local servers (the embedded Redis, a local cluster) are `majordomus/local/`;
- no import circle anywhere in the package, `TYPE_CHECKING` imports included;
- the surfaces meet only where the process commands are wired
  (`majordomus/cli/processes.py`, and `api/launch.py`, which runs a worker in `dev`);
- above the store, Redis is reached through the engine or a facade of the store named for
  what it keeps, never the store's plumbing (`STORE_PLUMBING`);
- the testing kit (`majordomus/testing/`) is where the engine and the worker meet in a
  test's process: it may import the workers, the store and the core, never a surface
  (`majordomus.api`, the CLI), arq or a Redis client itself; nothing but tests imports it;
- no bounded wait can drop the caller's cancel (no `asyncio.wait_for`).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import redis.asyncio

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("majordomus", "workers", "api")

_NOT_COMMANDS = (
    set(dir(dict)) | set(dir(list)) | set(dir(set)) | set(dir(str)) | set(dir(bytes))
    | {
        # Names Redis shares with everyday Python: too common to mean a command.
        "get", "set", "delete", "exists", "keys", "type", "time", "echo", "close", "aclose",
        "info", "sort", "copy", "move", "dump", "lock", "scan", "wait", "eval", "role",
        "save", "shutdown", "failover", "ping", "register", "client", "monitor", "reset",
        "append", "lastsave", "object", "memory", "lcs", "acl", "function", "transaction",
        "readonly", "readwrite", "quit", "hello", "auth", "select", "randomkey", "debug",
        "module", "command", "config", "cluster", "slowlog", "latency", "sync", "psync",
        "bitfield", "tfunction", "stralgo", "substr", "restore", "sentinel", "replicaof",
        "slaveof", "touch", "unlink", "watch", "unwatch", "bgsave", "bgrewriteaof",
        "initialize", "load_external_module", "parse_response", "response_callbacks",
        "connection_pool", "connection", "from_url", "from_pool", "single_connection_client",
        "auto_close_connection_pool", "get_connection_kwargs", "get_encoder", "get_retry",
        "set_retry", "set_response_callback", "on_connect", "json", "ft", "ts", "bf", "cf",
        "cms", "tdigest", "topk", "graph", "search", "expire", "decode",
    }
)
REDIS_COMMANDS = {
    name
    for name in dir(redis.asyncio.Redis)
    if not name.startswith("_") and name not in _NOT_COMMANDS
} | {"pipeline", "pubsub", "register_script", "execute_command", "publish", "expire"}

SURFACES = ("majordomus.api", "majordomus.workers")
"""The API and the worker: the top-level `api/` and `workers/` folders of the repository,
installed (and imported) as `majordomus.api` and `majordomus.workers` only."""
CORE_MAY_NOT_IMPORT = (*SURFACES, "majordomus.cli", "arq", "redis", "fakeredis")
STORE_MAY_NOT_IMPORT = (
    "majordomus.local",
    "subprocess",
    "multiprocessing",
    "majordomus.engine",
    "majordomus.context",
    "majordomus.registry",
    "majordomus.loading",
    "majordomus.builtins",
    "majordomus.cli",
    *SURFACES,
)
STORE_PLUMBING = tuple(
    f"majordomus.store.{name}"
    for name in (
        "base", "scripts", "batching", "policy", "connection", "cluster", "sentinel",
        "redis_internals", "fake_clock",
    )
)
"""The store's own workings: how its scripts are loaded, its writes batched, its clients
made. Everything above the store reaches Redis through the engine or a facade of the store
named for what it keeps (executions, the queue, the feed, tasks, schedules...), or gets a
client from `majordomus.store.connect`."""
STORE_PLUMBING_USERS = {"majordomus/testing/", "majordomus/local/"}
"""Where the plumbing may be reached from outside the store: the testing kit points
fakeredis at its virtual clock (`fake_clock`), and the launchers make its in-process
server."""
WHERE_SURFACES_MEET = {"majordomus/cli/processes.py", "api/launch.py"}
TESTING_MAY_NOT_IMPORT = ("majordomus.api", "majordomus.cli", "arq", "redis", "fakeredis")


def _modules() -> list[Path]:
    """Every module once, by the path it has in the repository (`majordomus/api` and
    `majordomus/workers` are links to the top-level folders, not modules of their own)."""
    return sorted(
        p
        for pkg in PACKAGES
        for p in (ROOT / pkg).rglob("*.py")
        if not _linked(p)
    )


def _linked(path: Path) -> bool:
    rel = path.relative_to(ROOT)
    return any((ROOT / parent).is_symlink() for parent in rel.parents if parent != Path("."))


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _imports(tree: ast.AST) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


def _names(name: str, roots: tuple[str, ...]) -> bool:
    return any(name == root or name.startswith(root + ".") for root in roots)


def _layer(rel: str) -> str:
    if rel.startswith("majordomus/store/"):
        return "store"
    if rel.startswith("majordomus/cli/"):
        return "cli"
    if rel.startswith("majordomus/testing/"):
        return "testing"
    if rel.startswith("majordomus/local/"):
        return "local"
    if rel.startswith("majordomus/"):
        return "core"
    return rel.split("/", 1)[0]


def _violations() -> list[str]:
    found: list[str] = []
    for path in _modules():
        rel = _rel(path)
        layer = _layer(rel)
        tree = ast.parse(path.read_text(), filename=rel)
        for line, name in _imports(tree):
            where = f"{rel}:{line} imports {name}"
            if layer not in ("store", "local") and _names(name, ("redis", "fakeredis")):
                found.append(f"{where}: only majordomus/store/ speaks to Redis")
            if layer == "local" and _names(name, (*SURFACES, "majordomus.cli")):
                found.append(f"{where}: the local launchers serve every surface, import none")
            if layer == "core" and _names(name, CORE_MAY_NOT_IMPORT):
                found.append(f"{where}: the core imports no surface, worker, arq or Redis")
            if layer == "store" and _names(name, STORE_MAY_NOT_IMPORT):
                found.append(f"{where}: the store depends on nothing above it")
            if layer == "testing" and _names(name, TESTING_MAY_NOT_IMPORT):
                found.append(f"{where}: the testing kit runs the engine and workers, no surface")
            if (
                layer != "store"
                and _names(name, STORE_PLUMBING)
                and not rel.startswith(tuple(STORE_PLUMBING_USERS))
            ):
                found.append(f"{where}: above the store, Redis is reached through its facades")
            if layer != "testing" and _names(name, ("majordomus.testing",)):
                found.append(f"{where}: only tests import the testing kit")
            if _names(name, ("api", "workers")):
                found.append(f"{where}: import it as majordomus.{name} (installs have no {name!r})")
            crosses = (layer == "cli" and _names(name, SURFACES)) or (
                layer == "api" and _names(name, ("majordomus.workers", "majordomus.cli"))
            ) or (layer == "workers" and _names(name, ("majordomus.api", "majordomus.cli")))
            if crosses and rel not in WHERE_SURFACES_MEET:
                found.append(f"{where}: surfaces meet only in {sorted(WHERE_SURFACES_MEET)}")
        if layer in ("store", "local"):
            continue
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in REDIS_COMMANDS
            ):
                found.append(
                    f"{rel}:{node.lineno} calls .{node.func.attr}(): "
                    "a Redis command belongs in majordomus/store/"
                )
    return found


def test_the_rules_see_the_commands_they_forbid() -> None:
    for command in ("xadd", "xread", "hgetall", "zadd", "zrange", "pipeline", "publish"):
        assert command in REDIS_COMMANDS
    for everyday in ("get", "items", "append", "keys", "wait", "decode"):
        assert everyday not in REDIS_COMMANDS


@pytest.mark.parametrize("rule", ["redis only in the store, dependencies one way"])
def test_no_module_breaks_the_layout(rule: str) -> None:
    assert _violations() == [], rule


def test_every_module_says_what_it_is_for() -> None:
    missing = [
        _rel(p)
        for p in _modules()
        if p.read_text().strip() and ast.get_docstring(ast.parse(p.read_text())) is None
    ]
    assert missing == []


def test_every_package_folder_is_a_package() -> None:
    """A plain `pip install .` (as the Docker image does, with `fast`) ships only folders with an `__init__.py`."""
    folders = {p.parent for p in _modules()}
    assert sorted(_rel(f) for f in folders if not (f / "__init__.py").exists()) == []


def test_no_bounded_wait_can_drop_a_cancel() -> None:
    """`asyncio.wait_for` on Python 3.11 drops a cancel that lands as its awaitable ends, and
    the loop being stopped goes on (the worker's poll loop did, woken by the very job its
    stop cancelled): every bounded wait is `majordomus.loops.within` instead."""
    found = [
        f"{_rel(path)}:{node.lineno} calls asyncio.wait_for(): use majordomus.loops.within"
        for path in _modules()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "wait_for"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "asyncio"
    ]
    assert found == []


# -- other libraries' private modules ----------------------------------------------------------

FENCED_LIBRARIES = ("typer", "click", "rich", "arq", "litestar", "mcp")
"""Libraries whose private modules (`typer._coercion`, `litestar._openapi`...) no module
imports but the one shim that library has (`FENCES`): a private module moves without notice,
and a shim keeps each use in one place, with why and a test that fails when it moves."""

FENCES = {"api/mcp/sdk.py"}
"""The shim modules, each the one place its library's private names are used (typer, click,
rich, arq and litestar have none: majordomus uses their public APIs alone)."""

FENCED_ELSEWHERE = ("majordomus/store/",)
"""The store fences redis-py's private names itself (`majordomus/store/redis_internals.py`),
checked by the store's own tests."""


def _private_imports(tree: ast.AST) -> list[tuple[int, str]]:
    """Each import of a private module (or a private name) of a `FENCED_LIBRARIES` library:
    `import x._y`, `from x._y import z`, `from x import _y`."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules = [(node.module, [alias.name for alias in node.names])]
        else:
            continue
        for module, names in modules:
            root, *rest = module.split(".")
            if root not in FENCED_LIBRARIES:
                continue
            if any(part.startswith("_") for part in rest):
                found.append((node.lineno, module))
            found += [(node.lineno, f"{module}.{n}") for n in names if n.startswith("_")]
    return found


def test_the_rule_sees_the_private_imports_it_forbids() -> None:
    source = (
        "import typer._completion_shared\n"
        "from click._compat import term_len\n"
        "from arq import _private\n"
        "from litestar.routes import HTTPRoute\n"
        "import rich.markup\n"
    )
    assert _private_imports(ast.parse(source)) == [
        (1, "typer._completion_shared"),
        (2, "click._compat"),
        (3, "arq._private"),
    ]


def test_only_a_shim_imports_a_private_module_of_another_library() -> None:
    found = [
        f"{_rel(path)}:{line} imports {name}: only its library's shim module may (as api/mcp/sdk.py)"
        for path in _modules()
        if _rel(path) not in FENCES and not _rel(path).startswith(FENCED_ELSEWHERE)
        for line, name in _private_imports(ast.parse(path.read_text()))
    ]
    assert found == []


# -- layers a newcomer can draw ----------------------------------------------------------------


def _module_name(path: Path) -> str:
    """The module a file is, as installed (`api/app.py` is `majordomus.api.app`)."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] in ("api", "workers"):
        parts.insert(0, "majordomus")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _import_graph() -> dict[str, dict[str, int]]:
    """Each module's imports of the package's modules, with a line of each: every import,
    at the top, inside a function or under `TYPE_CHECKING` alike (a module that needs
    another's types needs the module). `from package import name` is an import of the
    submodule `package.name` where there is one, else of the package."""
    paths = {_module_name(p): p for p in _modules()}
    graph: dict[str, dict[str, int]] = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, *([base] if base else [])])
                subs = [f"{base}.{alias.name}" for alias in node.names]
                targets = [s for s in subs if s in paths] or [base]
            else:
                continue
            for target in targets:
                while target and target not in paths:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    edges.setdefault(target, node.lineno)
        graph[name] = edges
    return graph


def _circles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected parts of more than one module (Tarjan's, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(graph[nxt])))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    part = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        part.append(member)
                        if member == node:
                            break
                    if len(part) > 1:
                        circles.append(sorted(part))
    return circles


def test_no_import_circle_anywhere() -> None:
    graph = _import_graph()
    shown = [
        " <-> ".join(part)
        + ": "
        + "; ".join(f"{a} -> {b} (line {graph[a][b]})" for a in part for b in graph[a] if b in part)
        for part in _circles(graph)
    ]
    assert shown == []


def test_the_circle_finder_finds_circles() -> None:
    assert _circles({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}) == [
        ["a", "b", "c"]
    ]
    assert _circles({"a": {"b": 1}, "b": {}}) == []
    graph = _import_graph()
    assert "majordomus.engine" in graph["majordomus.api.app"]  # the links are followed
    assert "majordomus.registry" in graph["majordomus.engine"]


def _below(graph: dict[str, dict[str, int]], name: str) -> set[str]:
    seen: set[str] = set()
    todo = [name]
    while todo:
        for nxt in graph[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_the_store_stands_only_on_what_is_below_it() -> None:
    """The store imports, of the rest of the package, only modules that never reach the
    store themselves (errors, configuration, ids, states, the declarations of schedules and
    episodes): the ground it stands on."""
    graph = _import_graph()
    store = {name for name in graph if name.startswith("majordomus.store")}
    found = [
        f"{name} imports {used} (line {line}), which reaches the store: "
        + ", ".join(sorted(_below(graph, used) & store)[:3])
        for name in sorted(store)
        for used, line in graph[name].items()
        if used not in store and _below(graph, used) & store
    ]
    assert found == []
