"""How the CLI shows things to people: tables, snapshots, a live follower, the queue.

Everything here reads typed answers: the output Structs of the capabilities
(`majordomus.model`, `builtins.capabilities`), events and live-channel control messages as
`majordomus.model` types, and the reports of `majordomus.reports`. `commands.py` converts an
answer that arrives as plain JSON values (from the HTTP API, say) once, so the same picture
comes out whichever way the CLI reached majordomus. An event is described in the model's
own words (`describe_event`, `progress_text`); only the follower's widgets word themselves.
Nothing here decides or reaches anything, and machine-readable output (`--format json`)
never passes through here.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from msgspec import UNSET, UnsetType
from rich.console import Console, Group, RenderableType
from rich.json import JSON
from rich.markup import escape
from rich.text import Text

from majordomus.builtins.capabilities import CapabilityList, CapabilityView, CollapseView
from majordomus.builtins.schedules import ScheduleList
from majordomus.cli.transport import Message
from majordomus.config import LIMITS
from majordomus.docs import type_text
from majordomus.errors import ExecutionError
from majordomus.model import (
    CancelOutput,
    EventHistory,
    ExecutionCancelled,
    ExecutionCancelling,
    ExecutionCompleted,
    ExecutionCreated,
    ExecutionDiagnosticEvent,
    ExecutionFailed,
    ExecutionList,
    ExecutionLog,
    ExecutionProgress,
    ExecutionQueued,
    ExecutionSnapshot,
    ExecutionStarted,
    ExecutionStepCompleted,
    ExecutionStepStarted,
    ProgressView,
    ProtocolInfo,
    StreamLagged,
    StreamReady,
    describe_event,
    event_type_of,
    progress_text,
)
from majordomus.reports import (
    QueuedCapability,
    QueueReport,
    RecentFailure,
    RunningExecution,
    WorkerPresence,
    WorkerReport,
)

if TYPE_CHECKING:
    from rich.progress import Progress
    from rich.table import Table

STATE_STYLE = {
    "queued": "yellow",
    "running": "cyan",
    "cancelling": "magenta",
    "succeeded": "green",
    "failed": "red",
    "cancelled": "dark_orange",
}
SEVERITY_STYLE = {"error": "red", "warning": "yellow"}
TRUNCATED_NOTE = "older events were dropped (an execution keeps its last 500)"


def state_text(state: str) -> Text:
    return Text(state, style=STATE_STYLE.get(state, ""))


def duration_text(ms: int | float | None | UnsetType) -> str:
    if ms is None or ms is UNSET:
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


def seconds_text(seconds: float | UnsetType) -> str:
    return "" if seconds is UNSET else duration_text(seconds * 1000)


def progress_of(progress: ProgressView | UnsetType) -> str:
    """An execution's progress in words, or nothing when it reported none."""
    return progress_text(progress) if isinstance(progress, ProgressView) else ""


def error_line(error: ExecutionError) -> str:
    return f"{error.code}: {error.message}"


def json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=False)


def pretty_json(value: Any) -> JSON:
    return JSON(json.dumps(value, ensure_ascii=False), indent=2, highlight=False)


def add_row(table: Table, *cells: str | Text) -> None:
    """A row of plain text: a capability's title or a log line is never read as rich markup."""
    table.add_row(*(c if isinstance(c, Text) else Text(c) for c in cells))


def key_values(rows: list[tuple[str, Any]]) -> Table:
    """Two columns, a name and its value; rows without a value are left out."""
    from rich.table import Table

    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    for key, value in rows:
        if value is None or value is UNSET or value == "":
            continue
        add_row(table, key, value if isinstance(value, Text) else Text(str(value)))
    return table


Layout = dict[str, Any]
"""How a column lays out its cells (keywords of rich's `Table.add_column`)."""
KEEP: Layout = {"no_wrap": True}
"""On one line: ids, names, states, times (a column named without a layout)."""
FOLD: Layout = {"overflow": "fold"}
"""Folded to fit: titles, messages, free text."""
NUMBER: Layout = {"justify": "right", "no_wrap": True}
"""Right-aligned on one line: counts and durations."""

Column = str | tuple[str, Layout]
"""A column's name, laid out as `KEEP`; or its name and layout."""
Row = Sequence[str | Text]


def table(
    title: str | None,
    columns: Sequence[Column],
    rows: Iterable[Row],
    caption: str | None = None,
) -> Table:
    """Every table the CLI draws: a title on the left, named columns, plain-text rows (rich's
    tables imported when one is drawn: following an execution draws none)."""
    from rich.table import Table

    drawn = Table(title=title, title_justify="left", caption=caption, caption_justify="left")
    for column in columns:
        name, layout = (column, KEEP) if isinstance(column, str) else column
        drawn.add_column(name, **layout)
    for row in rows:
        add_row(drawn, *row)
    return drawn


# -- events -----------------------------------------------------------------------------------


def lagged_text(lagged: StreamLagged) -> str:
    return f"{lagged.data.dropped} events were dropped before they could be shown"


def event_history(console: Console, page: EventHistory) -> None:
    rows = (
        (
            str(event.sequence),
            event.timestamp[11:23],
            event_type_of(event).removeprefix("execution."),
            describe_event(event),
        )
        for event in page.events
    )
    columns: list[Column] = [("seq", NUMBER), "time", "type", ("what", FOLD)]
    console.print(table(f"events of {page.execution_id}", columns, rows))
    notes = [f"state {page.state}", f"last sequence {page.last_sequence}"]
    if page.more:
        notes.append(f"more after it: --after {page.last_sequence}")
    if page.truncated:
        notes.append(TRUNCATED_NOTE)
    console.print(Text("; ".join(notes), style="dim"))


# -- executions -------------------------------------------------------------------------------


def snapshot(console: Console, snap: ExecutionSnapshot) -> None:
    rows: list[tuple[str, Any]] = [
        ("id", snap.id),
        ("capability", f"{snap.capability}  ({snap.title})"),
        ("state", state_text(snap.state)),
        ("created", snap.created_at),
        ("started", snap.started_at),
        ("finished", snap.finished_at),
        ("duration", duration_text(snap.duration_ms)),
        ("progress", progress_of(snap.progress)),
        ("worker", snap.worker),
        ("attempt", str(snap.attempt) if snap.attempt else None),
        ("priority", snap.priority if snap.priority != "normal" else None),
        ("due", snap.due_at),
        ("schedule", snap.schedule),
        ("idempotency key", snap.idempotency_key),
        ("retry of", snap.retry_of),
        ("retried as", snap.retried_as),
        ("collapsed", f"{snap.collapsed} later starts" if snap.collapsed else None),
        ("actor", snap.actor),
        ("episode", snap.episode),
        ("events", f"{min(snap.event_count, LIMITS.stream_events)} kept of {snap.event_count}"),
        ("input", json_text(snap.input)),
    ]
    console.print(key_values(rows))
    if snap.steps:
        columns: list[Column] = [(name, FOLD) for name in ("step", "title", "state", "detail")]
        steps = (
            (step.name, step.title, state_text(step.state), step.detail or "")
            for step in snap.steps
        )
        console.print(table("steps", columns, steps))
    for diag in snap.diagnostics:
        line = f"{diag.severity} {diag.code}: {diag.summary}"
        console.print(Text(line, style=SEVERITY_STYLE.get(diag.severity, "")))
    if snap.output is not UNSET:
        console.print(Text("output", style="bold"))
        console.print(pretty_json(snap.output))
    if isinstance(snap.error, ExecutionError):
        console.print(error_text(snap.error))


def error_text(error: ExecutionError) -> Text:
    text = Text(error_line(error), style="red")
    if error.suggestion:
        text.append(f"\n  {error.suggestion}", style="")
    return text


def execution_list(console: Console, answer: ExecutionList) -> None:
    # In the order asked for (`--sort`, `--order`; newest first unless told otherwise).
    title = f"{answer.count} executions ({answer.active} active, {answer.queued} queued)"
    columns: list[Column] = [
        "id",
        "capability",
        "state",
        "created",
        ("took", NUMBER),
        ("progress / error", FOLD),
    ]
    rows = (
        (
            snap.id,
            snap.capability,
            state_text(snap.state),
            snap.created_at[:19].replace("T", " "),
            duration_text(snap.duration_ms),
            error_line(snap.error)
            if isinstance(snap.error, ExecutionError)
            else progress_of(snap.progress),
        )
        for snap in answer.executions
    )
    console.print(table(title, columns, rows))


CANCEL_SAID = {
    "requested": "cancel requested",
    "already_requested": "cancel was already requested",
    "already_finished": "it had already finished",
}


def cancel_output(console: Console, answer: CancelOutput) -> None:
    execution = answer.execution
    console.print(Text(f"{execution.id}: {CANCEL_SAID[answer.outcome]}", style="bold"))
    if not answer.cancellable and answer.outcome == "requested":
        console.print(
            Text(
                "its capability does not check its cancel flag; the worker stops it after "
                "its cancel grace",
                style="yellow",
            )
        )
    snapshot(console, execution)


def protocol_info(console: Console, info: ProtocolInfo) -> None:
    live = info.live
    console.print(
        key_values(
            [
                ("protocol", info.protocol_version),
                ("live channel", f"GET {live.path}"),
                ("parameters", ", ".join(f"{k}: {v}" for k, v in live.parameters.items())),
                ("heartbeat", f"{info.heartbeat_seconds} s"),
                ("event types", ", ".join(info.event_types)),
                ("stream types", ", ".join(info.stream_types)),
            ]
        )
    )
    for title, values in (("limits", info.limits), ("settings", info.settings)):
        rows = ((key, json_text(value)) for key, value in values.items())
        console.print(table(title, ["name", ("value", FOLD)], rows))
    console.print(Text("the event and stream schemas: --format json", style="dim"))


# -- capabilities -----------------------------------------------------------------------------


def _route(view: CapabilityView) -> str:
    http = view.exposure.http
    return f"{http.method} {http.path}" if http is not None else "-"


def capability_list(console: Console, answer: CapabilityList) -> None:
    columns: list[Column] = ["id", "kind", ("title", FOLD), "command"]
    rows = (
        (
            view.id,
            view.kind + (", cancellable" if view.cancellable else ""),
            view.title,
            view.exposure.cli or "-",
        )
        for view in answer.capabilities
    )
    console.print(table(f"{answer.count} capabilities", columns, rows))
    console.print(
        Text("routes, tools and schemas: majordomus capabilities describe ID", style="dim")
    )


def schema_fields(schema: dict[str, Any], docs: dict[str, str] | None = None) -> Table:
    """An object schema's members: name, type, required, default, description."""
    required = set(schema.get("required", []))

    def row(name: str, node: Any) -> tuple[str, ...]:
        default = node.get("default", None) if isinstance(node, dict) else None
        return (
            name,
            type_text(node, schema) if isinstance(node, dict) else "any",
            "yes" if name in required else "",
            "" if name in required or default is None else json_text(default),
            str(node.get("description") or (docs or {}).get(name, "")),
        )

    names = ("field", "type", "required", "default", "description")
    columns: list[Column] = [(name, FOLD) for name in names]
    properties = schema.get("properties") or {}
    return table(None, columns, (row(name, node) for name, node in properties.items()))


def capability_view(
    console: Console, view: CapabilityView, docs: dict[str, str] | None = None
) -> None:
    exposure = view.exposure
    console.print(
        key_values(
            [
                ("id", view.id),
                ("title", view.title),
                ("kind", view.kind),
                ("stability", view.stability),
                ("cancellable", "yes" if view.cancellable else "no"),
                ("runs as an execution", "yes" if view.executable else "no (answers directly)"),
                ("max concurrency", view.max_concurrency),
                (
                    "per key",
                    f"{view.per_key.limit} at once per {view.per_key.member}" if view.per_key else None,
                ),
                ("rate limit", _rate_text(view.rate_limit)),
                ("collapse", _collapse_text(view.collapse)),
                ("tags", ", ".join(view.tags)),
                ("command", exposure.cli or "-"),
                ("HTTP", _route(view)),
                ("MCP tool", exposure.mcp_tool or "-"),
            ]
        )
    )
    console.print(Text(view.description))
    schema = view.input_schema
    if schema.get("properties"):
        console.print(Text("input", style="bold"))
        console.print(schema_fields(schema, docs))
    else:
        console.print(Text("input: nothing", style="bold"))
    out = view.output_schema
    console.print(Text(f"output: {out.get('title', type_text(out))}", style="bold"))
    console.print(Text("the full schemas: --format json", style="dim"))


# -- anything else ----------------------------------------------------------------------------


def generic(console: Console, value: Any) -> None:
    """An answer of a type this CLI draws no picture for, as the plain values it arrived as."""
    if isinstance(value, dict) and all(not isinstance(v, dict | list) for v in value.values()):
        console.print(key_values([(str(k), json_text(v)) for k, v in value.items()]))
        return
    console.print(pretty_json(value))


def schedule_list(console: Console, answer: ScheduleList) -> None:
    columns: list[Column] = ["id", "cron", "zone", "state", "next tick", "last tick", "missed"]
    rows = (
        (
            view.id,
            view.cron,
            view.timezone,
            "paused" if view.paused else "active",
            _stamp_text(view.next_tick_at),
            _stamp_text(view.last_tick_at),
            view.missed,
        )
        for view in answer.schedules
    )
    console.print(table(f"{answer.count} schedules, oldest first", columns, rows))


def _stamp_text(stamp: str | UnsetType) -> str:
    return stamp[:19].replace("T", " ") if isinstance(stamp, str) else ""


def queue_report(console: Console, report: QueueReport) -> None:
    console.print(queue_view(report))


def worker_report(console: Console, report: WorkerReport) -> None:
    console.print(workers_view(report))


RENDERERS: dict[type, Callable[[Console, Any], None]] = {
    ExecutionList: execution_list,
    ExecutionSnapshot: snapshot,
    EventHistory: event_history,
    CancelOutput: cancel_output,
    ProtocolInfo: protocol_info,
    CapabilityList: capability_list,
    CapabilityView: capability_view,
    QueueReport: queue_report,
    WorkerReport: worker_report,
    ScheduleList: schedule_list,
}
"""The picture of a capability's answer, by its output type (an answer of that type)."""


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
            # Imported here: only a terminal shows the bar; a pipe or a log need not load it.
            from rich.progress import (
                BarColumn,
                Progress,
                SpinnerColumn,
                TextColumn,
                TimeElapsedColumn,
            )

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

    def show(self, message: Message) -> None:
        """One event or control message: a line above the bar, the bar itself, or both."""
        match message:
            case ExecutionCreated(data=created):
                self.line(f"{message.execution_id} created ({created.capability})", "dim")
            case ExecutionQueued(data=queued):
                self.line(f"queued, {queued.ahead} ahead", "dim")
                self.status("queued, waiting for a worker")
            case ExecutionStarted():
                self.line("started", "dim")
                self.status("running")
            case ExecutionProgress(data=progress):
                self.show_progress(progress)
            case ExecutionStepStarted(data=step):
                mark = "▶ " if self.live else "step started: "
                self.line(f"{mark}{step.name}  {step.title}", "bold")
                self.status(step.title or step.name)
            case ExecutionStepCompleted(data=done):
                detail = f": {done.detail}" if done.detail else ""
                if self.live:
                    mark = "✓ " if done.ok else "✗ "
                else:
                    mark = "step done: " if done.ok else "step failed: "
                self.line(f"{mark}{done.name}{detail}", "green" if done.ok else "red")
            case ExecutionLog(data=log):
                prefix = "  " if log.stream == "handler" else f"  [{log.stream}] "
                self.line(f"{prefix}{log.message}", "red" if log.stream == "stderr" else "dim")
            case ExecutionDiagnosticEvent(data=diag):
                line = f"{diag.severity} {diag.code}: {diag.summary}"
                self.line(line, SEVERITY_STYLE.get(diag.severity, ""))
                if diag.suggestion:
                    self.line(f"  {diag.suggestion}", "dim")
            case ExecutionCancelling(data=cancelling):
                self.line(f"cancelling (asked by {cancelling.by})", "magenta")
                self.status("cancelling")
            case ExecutionCancelled():
                self.status("cancelled")
            case ExecutionCompleted():
                self.status("done")
            case ExecutionFailed():
                self.status("failed")
            case StreamLagged():
                self.note(lagged_text(message))
            case StreamReady(data=ready) if ready.truncated:
                self.note(TRUNCATED_NOTE)

    def show_progress(self, progress: ProgressView) -> None:
        if self.progress is None:
            self.line(f"progress {progress_text(progress)}")
            return
        current, total = progress.current, progress.total
        self.progress.update(
            self.task,
            completed=current,
            total=total,
            counts=f"{current}/{total}" if total is not None else str(current),
            message=escape(progress.message or ""),
        )


def outcome(console: Console, errors: Console, snap: ExecutionSnapshot) -> None:
    """How an execution ended: its output on stdout, or its error and suggestion on stderr."""
    state = snap.state
    took = duration_text(snap.duration_ms)
    suffix = f" in {took}" if took else ""
    mark = console.is_terminal
    if state == "succeeded":
        console.print(Text(("✓ " if mark else "") + f"succeeded{suffix}", style="bold green"))
        console.print(pretty_json(None if snap.output is UNSET else snap.output))
        return
    head = Text(
        ("✗ " if mark else "") + f"{state}{suffix}", style=f"bold {STATE_STYLE.get(state, '')}"
    )
    errors.print(head)
    if isinstance(snap.error, ExecutionError) and snap.error.message:
        errors.print(error_text(snap.error), highlight=False)


# -- the queue --------------------------------------------------------------------------------


def worker_status(worker: WorkerPresence) -> Text:
    if worker.silent:
        return Text("silent", style="bold red")
    if worker.draining:  # an operator's queue.drain
        return Text("draining", style="yellow")
    if not worker.accepting:  # stopping on SIGTERM
        return Text("stopping", style="yellow")
    return Text("ok", style="green")


def workers_table(workers: list[WorkerPresence], lease_seconds: float) -> RenderableType:
    if not workers:
        return Text(
            "no worker has reported itself: start one with `majordomus worker`", style="yellow"
        )
    columns: list[Column] = [
        "worker",
        ("host", FOLD),
        ("pid", NUMBER),
        ("running", NUMBER),
        ("last beat", NUMBER),
        "status",
    ]
    caption = f"silent: no beat for over the {lease_seconds:g} s lease, or its lease is gone"
    return table("workers", columns, map(_worker_row, workers), caption)


def _worker_row(worker: WorkerPresence) -> Row:
    beat = f"{worker.seconds_since_beat} s ago"
    status = worker_status(worker)
    return (worker.id, worker.host, str(worker.pid), str(worker.running), beat, status)


def queue_view(report: QueueReport) -> RenderableType:
    workers = report.workers
    silent = sum(1 for w in workers if w.silent)
    head = Text(
        f"{report.queued} queued, {report.running} running, {len(workers)} workers"
        + (f" ({silent} silent)" if silent else "")
        + f"  at {report.taken_at}",
        style="bold",
    )
    return Group(
        head,
        queued_table(report.queued_by_capability),
        running_table(report.running_executions),
        workers_table(workers, report.lease_seconds),
        failures_table(report.recent_failures),
    )


def _rate_text(rate: Any) -> str | None:
    """A capability's rate limit in words (`majordomus.flow.RateLimit`), or None."""
    if rate is None:
        return None
    each = f" per {rate.key}" if rate.key else ""
    burst = f", {rate.burst} at once" if rate.burst > 1 else ""
    return f"{rate.limit} starts a {rate.per}{each}{burst}"


def _collapse_text(collapse: CollapseView | None) -> str | None:
    """A capability's debounce or throttle in words (`majordomus.flow`), or None."""
    if collapse is None:
        return None
    first = "last" if collapse.kind == "debounce" else "first"
    return f"{collapse.kind} per {collapse.member}, {collapse.seconds:g} s ({first} input runs)"


def queued_table(groups: list[QueuedCapability]) -> RenderableType:
    if not groups:
        return Text("nothing queued", style="dim")
    columns: list[Column] = [
        "capability", ("count", NUMBER), ("held", NUMBER), ("oldest wait", NUMBER), "oldest",
        ("delayed", NUMBER), "next due",
    ]
    rows = (
        (
            g.capability,
            str(g.count),
            str(g.held + g.held_per_key + g.held_by_rate),
            seconds_text(g.oldest_wait_seconds) if g.oldest else "-",
            g.oldest or "-",
            str(g.delayed),
            g.next_due_at or "-",
        )
        for g in groups
    )
    return table("queued", columns, rows)


def running_table(running: list[RunningExecution]) -> RenderableType:
    if not running:
        return Text("nothing running", style="dim")
    columns: list[Column] = [
        "worker",
        "execution",
        "capability",
        "state",
        ("for", NUMBER),
        ("progress", FOLD),
    ]
    return table("running, by worker", columns, map(_running_row, running))


def _running_row(run: RunningExecution) -> Row:
    since, progress = seconds_text(run.running_seconds), progress_of(run.progress)
    return (run.worker or "?", run.id, run.capability, state_text(run.state), since, progress)


def failures_table(failures: list[RecentFailure]) -> RenderableType:
    """The executions that failed or were cancelled lately, newest first, and how many of
    each code (docs/guides/monitoring.md, "What to watch", reads them by code)."""
    if not failures:
        return Text("no recent failures or cancellations", style="dim")
    columns: list[Column] = ["finished", "execution", "capability", "code", ("message", FOLD)]
    codes = Counter(f.code for f in failures)
    caption = "by code: " + ", ".join(f"{code} {count}" for code, count in codes.most_common())
    return table("recent failures and cancellations", columns, map(_failure_row, failures), caption)


def _failure_row(failure: RecentFailure) -> Row:
    finished = (failure.finished_at or "")[:19].replace("T", " ")
    style = STATE_STYLE["cancelled"] if failure.code == "cancelled" else "red"
    code = Text(failure.code, style=style)
    return (finished, failure.id, failure.capability, code, failure.message)


def workers_view(report: WorkerReport) -> RenderableType:
    return workers_table(report.workers, report.lease_seconds)
