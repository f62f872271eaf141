"""How the CLI shows things to people: tables, snapshots, a live follower, the queue.

Everything here reads plain JSON-shaped values (what the HTTP API sends, or a typed answer
passed through `msgspec.to_builtins`), so the same picture comes out whichever way the CLI
reached majordomus. It decides nothing and reaches nothing: `commands.py` calls it with
answers in hand. Machine-readable output (`--format json`) never passes through here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.json import JSON
from rich.markup import escape
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from majordomus.docs import field_docs, type_text

STATE_STYLE = {
    "queued": "yellow",
    "running": "cyan",
    "cancelling": "magenta",
    "succeeded": "green",
    "failed": "red",
    "cancelled": "dark_orange",
}

Data = Any


def state_text(state: str) -> Text:
    return Text(state, style=STATE_STYLE.get(state, ""))


def duration_text(ms: int | float | None) -> str:
    if ms is None:
        return ""
    if ms < 1000:
        return f"{int(ms)} ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} m {rest} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} m"


def seconds_text(seconds: float | None) -> str:
    return "" if seconds is None else duration_text(seconds * 1000)


def progress_text(progress: Data) -> str:
    if not isinstance(progress, dict):
        return ""
    current, total = progress.get("current"), progress.get("total")
    counts = f"{current}/{total}" if total is not None else f"{current}"
    message = progress.get("message")
    return f"{counts} {message}" if message else counts


def json_text(value: Data) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=False)


def pretty_json(value: Data) -> JSON:
    return JSON(json.dumps(value, ensure_ascii=False), indent=2, highlight=False)


def add_row(table: Table, *cells: str | Text) -> None:
    """A row of plain text: a capability's title or a log line is never read as rich markup."""
    table.add_row(*(c if isinstance(c, Text) else Text(c) for c in cells))


def key_values(rows: list[tuple[str, Any]]) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    for key, value in rows:
        if value is None or value == "":
            continue
        add_row(table, key, value if isinstance(value, Text) else Text(str(value)))
    return table


# -- events -----------------------------------------------------------------------------------


def event_summary(event: Data) -> str:
    """One event in a few words, as a person reads it."""
    kind = str(event.get("type", "?"))
    data = event.get("data") or {}
    if kind == "execution.created":
        return f"created: {data.get('capability')}"
    if kind == "execution.queued":
        return f"queued, {data.get('ahead', 0)} ahead"
    if kind == "execution.started":
        return "started"
    if kind == "execution.progress":
        return progress_text(data)
    if kind == "execution.step.started":
        return f"{data.get('name')}: {data.get('title')}"
    if kind == "execution.step.completed":
        outcome = "done" if data.get("ok", True) else "failed"
        detail = data.get("detail")
        return f"{data.get('name')} {outcome}" + (f": {detail}" if detail else "")
    if kind == "execution.log":
        return f"[{data.get('stream', 'handler')}] {data.get('message', '')}"
    if kind == "execution.diagnostic":
        return f"{data.get('severity')} {data.get('code')}: {data.get('summary')}"
    if kind == "execution.cancelling":
        return f"cancel asked by {data.get('by')}"
    if kind == "execution.cancelled":
        return "cancelled"
    if kind == "execution.completed":
        return "completed"
    if kind == "execution.failed":
        error = data.get("error") or {}
        return f"{error.get('code')}: {error.get('message')}"
    if kind == "stream.lagged":
        return f"{data.get('dropped', 'some')} events were dropped before they could be shown"
    return json_text(data)


def event_history(console: Console, page: Data) -> None:
    table = Table(title=f"events of {page.get('execution_id')}", title_justify="left")
    table.add_column("seq", justify="right", no_wrap=True)
    table.add_column("time", no_wrap=True)
    table.add_column("type", no_wrap=True)
    table.add_column("what", overflow="fold")
    for event in page.get("events", []):
        add_row(
            table,
            str(event.get("sequence")),
            str(event.get("timestamp", ""))[11:23],
            str(event.get("type", "")).removeprefix("execution."),
            event_summary(event),
        )
    console.print(table)
    notes = [f"state {page.get('state')}", f"last sequence {page.get('last_sequence')}"]
    if page.get("more"):
        notes.append(f"more after it: --after {page.get('last_sequence')}")
    if page.get("truncated"):
        notes.append("older events were dropped (an execution keeps its last 500)")
    console.print(Text("; ".join(notes), style="dim"))


# -- executions -------------------------------------------------------------------------------


def snapshot(console: Console, snap: Data) -> None:
    state = str(snap.get("state", "?"))
    rows: list[tuple[str, Any]] = [
        ("id", snap.get("id")),
        ("capability", f"{snap.get('capability')}  ({snap.get('title')})"),
        ("state", state_text(state)),
        ("created", snap.get("created_at")),
        ("started", snap.get("started_at")),
        ("finished", snap.get("finished_at")),
        ("duration", duration_text(snap.get("duration_ms"))),
        ("progress", progress_text(snap.get("progress"))),
        ("worker", snap.get("worker")),
        ("actor", snap.get("actor")),
        ("episode", snap.get("episode")),
        ("events", f"{snap.get('event_count')} kept of {snap.get('last_sequence')}"),
        ("input", json_text(snap.get("input"))),
    ]
    console.print(key_values(rows))
    steps = snap.get("steps") or []
    if steps:
        table = Table(title="steps", title_justify="left")
        for column in ("step", "title", "state", "detail"):
            table.add_column(column, overflow="fold")
        for step in steps:
            add_row(
                table,
                str(step.get("name")),
                str(step.get("title")),
                state_text(str(step.get("state"))),
                str(step.get("detail", "")),
            )
        console.print(table)
    for diag in snap.get("diagnostics") or []:
        style = {"error": "red", "warning": "yellow"}.get(str(diag.get("severity")), "")
        line = f"{diag.get('severity')} {diag.get('code')}: {diag.get('summary')}"
        console.print(Text(line, style=style))
    if "output" in snap:
        console.print(Text("output", style="bold"))
        console.print(pretty_json(snap["output"]))
    error = snap.get("error")
    if isinstance(error, dict):
        console.print(error_text(error))


def error_text(error: Data) -> Text:
    text = Text(f"{error.get('code')}: {error.get('message')}", style="red")
    if error.get("suggestion"):
        text.append(f"\n  {error['suggestion']}", style="")
    return text


def execution_list(console: Console, answer: Data) -> None:
    executions = answer.get("executions", [])
    table = Table(
        title=(
            f"{answer.get('count', len(executions))} executions, newest first "
            f"({answer.get('active', 0)} active, {answer.get('queued', 0)} queued)"
        ),
        title_justify="left",
    )
    table.add_column("id", no_wrap=True)
    table.add_column("capability", no_wrap=True)
    table.add_column("state", no_wrap=True)
    table.add_column("created", no_wrap=True)
    table.add_column("took", justify="right", no_wrap=True)
    table.add_column("progress / error", overflow="fold")
    for snap in executions:
        error = snap.get("error")
        detail = (
            f"{error.get('code')}: {error.get('message')}"
            if isinstance(error, dict)
            else progress_text(snap.get("progress"))
        )
        add_row(
            table,
            str(snap.get("id")),
            str(snap.get("capability")),
            state_text(str(snap.get("state"))),
            str(snap.get("created_at", ""))[:19].replace("T", " "),
            duration_text(snap.get("duration_ms")),
            detail,
        )
    console.print(table)


def cancel_output(console: Console, answer: Data) -> None:
    execution = answer.get("execution") or {}
    outcome = str(answer.get("outcome"))
    said = {
        "requested": "cancel requested",
        "already_requested": "cancel was already requested",
        "already_finished": "it had already finished",
    }.get(outcome, outcome)
    console.print(Text(f"{execution.get('id')}: {said}", style="bold"))
    if not answer.get("cancellable", True) and outcome == "requested":
        console.print(
            Text(
                "its capability does not check its cancel flag; the worker stops it after "
                "its cancel grace",
                style="yellow",
            )
        )
    snapshot(console, execution)


def protocol_info(console: Console, info: Data) -> None:
    live = info.get("live") or {}
    console.print(
        key_values(
            [
                ("protocol", info.get("protocol_version")),
                ("live channel", f"GET {live.get('path')}"),
                (
                    "parameters",
                    ", ".join(f"{k}: {v}" for k, v in (live.get("parameters") or {}).items()),
                ),
                ("heartbeat", f"{info.get('heartbeat_seconds')} s"),
                ("event types", ", ".join(info.get("event_types", []))),
                ("stream types", ", ".join(info.get("stream_types", []))),
            ]
        )
    )
    for title, values in (("limits", info.get("limits")), ("settings", info.get("settings"))):
        if not isinstance(values, dict):
            continue
        table = Table(title=title, title_justify="left")
        table.add_column("name", no_wrap=True)
        table.add_column("value", overflow="fold")
        for key, value in values.items():
            add_row(table, key, json_text(value))
        console.print(table)
    console.print(Text("the event and stream schemas: --format json", style="dim"))


# -- capabilities -----------------------------------------------------------------------------


def _route(view: Data) -> str:
    http = (view.get("exposure") or {}).get("http")
    return f"{http.get('method')} {http.get('path')}" if isinstance(http, dict) else "-"


def capability_list(console: Console, answer: Data) -> None:
    table = Table(title=f"{answer.get('count')} capabilities", title_justify="left")
    table.add_column("id", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    table.add_column("title", overflow="fold")
    table.add_column("command", no_wrap=True)
    for view in answer.get("capabilities", []):
        exposure = view.get("exposure") or {}
        kind = str(view.get("kind"))
        if view.get("cancellable"):
            kind += ", cancellable"
        add_row(
            table,
            str(view.get("id")),
            kind,
            str(view.get("title")),
            str(exposure.get("cli") or "-"),
        )
    console.print(table)
    console.print(
        Text("routes, tools and schemas: majordomus capabilities describe ID", style="dim")
    )


def schema_fields(schema: Data, docs: dict[str, str] | None = None) -> Table:
    """An object schema's members: name, type, required, default, description."""
    table = Table()
    for column in ("field", "type", "required", "default", "description"):
        table.add_column(column, overflow="fold")
    required = set(schema.get("required", []))
    for name, node in (schema.get("properties") or {}).items():
        default = node.get("default", None) if isinstance(node, dict) else None
        add_row(
            table,
            name,
            type_text(node, schema) if isinstance(node, dict) else "any",
            "yes" if name in required else "",
            "" if name in required or default is None else json_text(default),
            str(node.get("description") or (docs or {}).get(name, "")),
        )
    return table


def capability_view(console: Console, view: Data, docs: dict[str, str] | None = None) -> None:
    exposure = view.get("exposure") or {}
    console.print(
        key_values(
            [
                ("id", view.get("id")),
                ("title", view.get("title")),
                ("kind", view.get("kind")),
                ("stability", view.get("stability")),
                ("cancellable", "yes" if view.get("cancellable") else "no"),
                (
                    "runs as an execution",
                    "yes" if view.get("executable") else "no (answers directly)",
                ),
                ("max concurrency", view.get("max_concurrency")),
                ("tags", ", ".join(view.get("tags") or [])),
                ("command", exposure.get("cli") or "-"),
                ("HTTP", _route(view)),
                ("MCP tool", exposure.get("mcp_tool") or "-"),
            ]
        )
    )
    console.print(Text(str(view.get("description", ""))))
    schema = view.get("input_schema") or {}
    if schema.get("properties"):
        console.print(Text("input", style="bold"))
        console.print(schema_fields(schema, docs))
    else:
        console.print(Text("input: nothing", style="bold"))
    out = view.get("output_schema") or {}
    console.print(Text(f"output: {out.get('title', type_text(out))}", style="bold"))
    console.print(Text("the full schemas: --format json", style="dim"))


# -- anything else ----------------------------------------------------------------------------


def generic(console: Console, value: Data) -> None:
    if isinstance(value, dict) and all(not isinstance(v, dict | list) for v in value.values()):
        console.print(key_values([(str(k), json_text(v)) for k, v in value.items()]))
        return
    console.print(pretty_json(value))


def renderer_for(output_type: type) -> Callable[[Console, Data], None]:
    """The picture of a capability's answer, chosen by its output type."""
    from majordomus.builtins.capabilities import CapabilityList, CapabilityView
    from majordomus.model import (
        CancelOutput,
        EventHistory,
        ExecutionList,
        ExecutionSnapshot,
        ProtocolInfo,
    )

    table: dict[type, Callable[[Console, Data], None]] = {
        ExecutionList: execution_list,
        ExecutionSnapshot: snapshot,
        EventHistory: event_history,
        CancelOutput: cancel_output,
        ProtocolInfo: protocol_info,
        CapabilityList: capability_list,
        CapabilityView: capability_view,
    }
    return table.get(output_type, generic)


def input_docs(input_type: type) -> dict[str, str]:
    return field_docs(input_type)


# -- following one execution ------------------------------------------------------------------


class Follower:
    """An execution's events as they come: a live progress bar on a terminal, lines otherwise.

    On a terminal the bar (current/total and the latest message) stays at the bottom while
    steps, log lines and diagnostics scroll above it. Anywhere else each event is one plain
    line, so a log file or a CI job reads the same story without escape codes.
    """

    def __init__(self, console: Console, title: str) -> None:
        self.console = console
        self.title = title
        self.live = console.is_terminal
        self.progress: Progress | None = None
        self.task: Any = None

    def __enter__(self) -> Follower:
        if self.live:
            self.progress = Progress(
                SpinnerColumn(),
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                TextColumn("{task.fields[counts]}"),
                TextColumn("{task.fields[message]}"),
                TimeElapsedColumn(),
                console=self.console,
            )
            self.progress.start()
            self.task = self.progress.add_task(
                escape(self.title), total=None, counts="", message="starting"
            )
        return self

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None

    def line(self, text: str | Text, style: str = "") -> None:
        shown = text if isinstance(text, Text) else Text(text, style=style)
        target = self.progress.console if self.progress is not None else self.console
        target.print(shown, highlight=False, soft_wrap=not self.live)

    def status(self, message: str) -> None:
        if self.progress is not None:
            self.progress.update(self.task, message=escape(message))

    def note(self, text: str) -> None:
        self.line(text, "bold yellow")

    def show(self, event: Data) -> None:
        kind = str(event.get("type", ""))
        data = event.get("data") or {}
        handler = getattr(self, "_" + kind.replace(".", "_"), None)
        if handler is not None:
            handler(data, event)
        elif not kind.startswith("stream."):
            self.line(f"{kind}: {event_summary(event)}", "dim")

    def _execution_created(self, data: Data, event: Data) -> None:
        self.line(f"{event.get('execution_id')} created ({data.get('capability')})", "dim")

    def _execution_queued(self, data: Data, event: Data) -> None:
        ahead = data.get("ahead", 0)
        self.line(f"queued, {ahead} ahead", "dim")
        self.status("queued, waiting for a worker")

    def _execution_started(self, data: Data, event: Data) -> None:
        self.line("started", "dim")
        self.status("running")

    def _execution_progress(self, data: Data, event: Data) -> None:
        if self.progress is None:
            self.line(f"progress {progress_text(data)}")
            return
        total = data.get("total")
        current = data.get("current", 0)
        self.progress.update(
            self.task,
            completed=current,
            total=total,
            counts=f"{current}/{total}" if total is not None else str(current),
            message=escape(str(data.get("message") or "")),
        )

    def _execution_step_started(self, data: Data, event: Data) -> None:
        mark = "▶ " if self.live else "step started: "
        self.line(f"{mark}{data.get('name')}  {data.get('title')}", "bold")
        self.status(str(data.get("title") or data.get("name")))

    def _execution_step_completed(self, data: Data, event: Data) -> None:
        ok = data.get("ok", True)
        detail = f": {data['detail']}" if data.get("detail") else ""
        if self.live:
            mark = "✓ " if ok else "✗ "
        else:
            mark = "step done: " if ok else "step failed: "
        self.line(f"{mark}{data.get('name')}{detail}", "green" if ok else "red")

    def _execution_log(self, data: Data, event: Data) -> None:
        stream = data.get("stream", "handler")
        prefix = "  " if stream == "handler" else f"  [{stream}] "
        self.line(f"{prefix}{data.get('message', '')}", "dim" if stream != "stderr" else "red")

    def _execution_diagnostic(self, data: Data, event: Data) -> None:
        style = {"error": "red", "warning": "yellow"}.get(str(data.get("severity")), "")
        self.line(f"{data.get('severity')} {data.get('code')}: {data.get('summary')}", style)
        if data.get("suggestion"):
            self.line(f"  {data['suggestion']}", "dim")

    def _execution_cancelling(self, data: Data, event: Data) -> None:
        self.line(f"cancelling (asked by {data.get('by')})", "magenta")
        self.status("cancelling")

    def _execution_cancelled(self, data: Data, event: Data) -> None:
        self.status("cancelled")

    def _execution_completed(self, data: Data, event: Data) -> None:
        self.status("done")

    def _execution_failed(self, data: Data, event: Data) -> None:
        self.status("failed")

    def _stream_lagged(self, data: Data, event: Data) -> None:
        self.note(event_summary(event))

    def _stream_ready(self, data: Data, event: Data) -> None:
        if data.get("truncated"):
            self.note("older events were dropped (an execution keeps its last 500)")


def outcome(console: Console, errors: Console, snap: Data) -> None:
    """How an execution ended: its output on stdout, or its error and suggestion on stderr."""
    state = str(snap.get("state"))
    took = duration_text(snap.get("duration_ms"))
    suffix = f" in {took}" if took else ""
    mark = console.is_terminal
    if state == "succeeded":
        console.print(Text(("✓ " if mark else "") + f"succeeded{suffix}", style="bold green"))
        console.print(pretty_json(snap.get("output")))
        return
    error = snap.get("error")
    head = Text(
        ("✗ " if mark else "") + f"{state}{suffix}", style=f"bold {STATE_STYLE.get(state, '')}"
    )
    errors.print(head)
    if isinstance(error, dict) and error.get("message"):
        errors.print(error_text(error), highlight=False)


# -- the queue --------------------------------------------------------------------------------


def worker_status(worker: Data) -> Text:
    if worker.get("silent"):
        return Text("silent", style="bold red")
    if not worker.get("accepting", True):
        return Text("draining", style="yellow")
    return Text("ok", style="green")


def workers_table(workers: list[Data], lease_seconds: float) -> RenderableType:
    if not workers:
        return Text(
            "no worker has reported itself: start one with `majordomus worker`", style="yellow"
        )
    table = Table(title="workers", title_justify="left")
    table.add_column("worker", no_wrap=True)
    table.add_column("host", overflow="fold")
    table.add_column("pid", justify="right", no_wrap=True)
    table.add_column("running", justify="right", no_wrap=True)
    table.add_column("last beat", justify="right", no_wrap=True)
    table.add_column("status", no_wrap=True)
    for worker in workers:
        add_row(
            table,
            str(worker.get("id")),
            str(worker.get("host")),
            str(worker.get("pid")),
            str(worker.get("running")),
            f"{worker.get('seconds_since_beat')} s ago",
            worker_status(worker),
        )
    table.caption = f"silent: no beat for over the {lease_seconds:g} s lease, or its lease is gone"
    table.caption_justify = "left"
    return table


def queue_view(report: Data) -> RenderableType:
    workers = report.get("workers", [])
    silent = sum(1 for w in workers if w.get("silent"))
    head = Text(
        f"{report.get('queued', 0)} queued, {report.get('running', 0)} running, "
        f"{len(workers)} workers"
        + (f" ({silent} silent)" if silent else "")
        + f"  at {report.get('taken_at')}",
        style="bold",
    )
    parts: list[RenderableType] = [head]

    groups = report.get("queued_by_capability", [])
    if groups:
        table = Table(title="queued", title_justify="left")
        table.add_column("capability", no_wrap=True)
        table.add_column("count", justify="right", no_wrap=True)
        table.add_column("oldest wait", justify="right", no_wrap=True)
        table.add_column("oldest", no_wrap=True)
        for group in groups:
            add_row(
                table,
                str(group.get("capability")),
                str(group.get("count")),
                seconds_text(group.get("oldest_wait_seconds")),
                str(group.get("oldest")),
            )
        parts.append(table)
    else:
        parts.append(Text("nothing queued", style="dim"))

    running = report.get("running_executions", [])
    if running:
        table = Table(title="running, by worker", title_justify="left")
        table.add_column("worker", no_wrap=True)
        table.add_column("execution", no_wrap=True)
        table.add_column("capability", no_wrap=True)
        table.add_column("state", no_wrap=True)
        table.add_column("for", justify="right", no_wrap=True)
        table.add_column("progress", overflow="fold")
        for run in running:
            add_row(
                table,
                str(run.get("worker", "?")),
                str(run.get("id")),
                str(run.get("capability")),
                state_text(str(run.get("state"))),
                seconds_text(run.get("running_seconds")),
                progress_text(run.get("progress")),
            )
        parts.append(table)
    else:
        parts.append(Text("nothing running", style="dim"))

    parts.append(workers_table(workers, float(report.get("lease_seconds", 0))))

    failures = report.get("recent_failures", [])
    if failures:
        table = Table(title="recent failures", title_justify="left")
        table.add_column("finished", no_wrap=True)
        table.add_column("execution", no_wrap=True)
        table.add_column("capability", no_wrap=True)
        table.add_column("code", no_wrap=True)
        table.add_column("message", overflow="fold")
        for failure in failures:
            add_row(
                table,
                str(failure.get("finished_at", ""))[:19].replace("T", " "),
                str(failure.get("id")),
                str(failure.get("capability")),
                Text(str(failure.get("code")), style="red"),
                str(failure.get("message")),
            )
        parts.append(table)
    else:
        parts.append(Text("no recent failures", style="dim"))
    return Group(*parts)


def workers_view(report: Data) -> RenderableType:
    return workers_table(report.get("workers", []), float(report.get("lease_seconds", 0)))
