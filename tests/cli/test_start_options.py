"""`majordomus run CAP` takes `executions.start`'s own members as options, projected from
its input like every other option: `--start-at`, `--delay-ms`, `--priority` and
`--idempotency-key`, each `--start-<member>` where the capability's own input has that
flag (`executions.demonstrate` has its own `--delay-ms`)."""

from __future__ import annotations

from tests.cli.conftest import Cli


def test_run_starts_delayed_at_a_priority_under_a_key(cli: Cli) -> None:
    snap = cli.json(
        "run", "tests.noop", "--delay-ms", "60000", "--priority", "high",
        "--idempotency-key", "nightly-1", "--detach",
    )
    assert (snap["state"], snap["priority"], snap["idempotency_key"]) == (
        "queued", "high", "nightly-1"
    )
    assert "due_at" in snap
    again = cli.json("run", "tests.noop", "--idempotency-key", "nightly-1", "--detach")
    assert again["id"] == snap["id"]


def test_a_start_option_the_capability_also_has_is_prefixed(cli: Cli) -> None:
    help_text = cli("run", "executions.demonstrate", "--help").stdout
    assert "--delay-ms" in help_text and "--start-delay-ms" in help_text
    snap = cli.json(
        "run", "executions.demonstrate", "--delay-ms", "5", "--start-delay-ms", "60000",
        "--detach",
    )
    assert snap["input"]["delay_ms"] == 5
    assert "due_at" in snap


def test_a_bad_priority_is_refused_with_the_levels_named(cli: Cli) -> None:
    result = cli("run", "tests.noop", "--priority", "urgent", "--detach")
    assert result.exit_code != 0
    assert "priority" in result.output and "Traceback" not in result.output
