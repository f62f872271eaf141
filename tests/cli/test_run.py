"""`majordomus run` and `majordomus follow`: an execution started and followed live to its end,
in a real terminal and without one, with an exit code per outcome and Ctrl-C to cancel."""

from __future__ import annotations

import re
from typing import Any

import pytest

from majordomus.errors import EXIT_CODE
from tests.cli.conftest import Cli

pytestmark = pytest.mark.usefixtures("spawns")  # it starts child processes of its own

EXECUTION_ID = re.compile(r"x-\d{8}T\d{6}Z-[0-9a-f]{8}")


def test_run_in_a_terminal_shows_a_progress_bar_and_the_steps_and_exits_0(
    workers: Any, terminal: Any
) -> None:
    workers.start()
    term = terminal("run", "executions.demonstrate", "--input", '{"steps": 3, "delay_ms": 150}')
    assert term.wait() == 0, term.screen
    screen = term.screen
    assert "━" in term.text  # rich's bar
    assert "3/3" in screen
    for step in (1, 2, 3):
        assert f"▶ step-{step}  Step {step} of 3" in screen
        assert f"✓ step-{step}" in screen
        assert f"step {step}: line 1 of 1" in screen
    assert "✓ succeeded" in screen
    assert '"observed": true' in screen


def test_run_without_a_terminal_prints_plain_lines_and_no_bar(workers: Any, cli: Cli) -> None:
    workers.start()
    result = cli("run", "executions.demonstrate", "--input", '{"steps": 2, "log_lines": 2}')
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "step started: step-1  Step 1 of 2" in lines
    assert "  step 2: line 2 of 2" in lines
    assert "step done: step-2" in lines
    assert "progress 2/2 step 2 of 2" in lines
    assert any(line.startswith("succeeded in ") for line in lines)
    assert "\x1b[" not in result.output and "━" not in result.output


def test_run_with_input_of_the_wrong_type_exits_invalid_input_with_its_message(
    terminal: Any,
) -> None:
    term = terminal("run", "executions.demonstrate", "--input", '{"steps":"many"}')
    assert term.wait() == EXIT_CODE["invalid_input"] == 2
    assert "majordomus: invalid_input: /steps: 'many' is not of type 'integer'" in term.screen
    assert "Traceback" not in term.screen


def test_run_that_fails_at_a_step_exits_with_the_failed_code_and_says_why(
    workers: Any, terminal: Any
) -> None:
    workers.start()
    term = terminal("run", "executions.demonstrate", "--input", '{"fail_at": 2}')
    assert term.wait() == EXIT_CODE["internal"] == 1
    screen = term.screen
    assert "✓ step-1" in screen and "✗ step-2: failing as asked (fail_at)" in screen
    assert "✗ failed" in screen
    assert "internal: the capability failed unexpectedly" in screen
    assert "search the server's output for execution_id=" in screen


def test_ctrl_c_cancels_a_long_demonstration_and_exits_cancelled(
    workers: Any, terminal: Any, cli: Cli
) -> None:
    workers.start()
    term = terminal("run", "executions.demonstrate", "--input", '{"steps": 100, "delay_ms": 200}')
    term.read_until(lambda s: "▶ step-2" in s)
    term.interrupt()
    assert term.wait() == EXIT_CODE["cancelled"] == 3
    screen = term.screen
    assert "Ctrl-C: asking" in screen and "cancelling (asked by cli)" in screen
    assert "✗ cancelled" in screen
    execution_id = EXECUTION_ID.search(screen)
    assert execution_id is not None
    assert cli.json("executions", "show", execution_id.group())["state"] == "cancelled"


def test_a_second_ctrl_c_leaves_it_running_and_says_how_to_follow_it_again(
    workers: Any, terminal: Any, cli: Cli
) -> None:
    workers.start()
    # tests.stubborn ignores its cancel flag, so the first Ctrl-C cannot end it at once.
    term = terminal("run", "tests.stubborn", "--input", '{"seconds": 30}')
    term.read_until(lambda s: "started" in s)
    term.interrupt()
    term.read_until(lambda s: "cancelling (asked by cli)" in s)
    term.interrupt()
    assert term.wait() == 130
    execution_id = EXECUTION_ID.search(term.screen)
    assert execution_id is not None
    assert f"majordomus follow {execution_id.group()}" in term.screen
    # It goes on without us: the worker stops it after its cancel grace.
    result = cli("follow", execution_id.group())
    assert result.exit_code == EXIT_CODE["cancelled"], result.output


def test_run_detached_prints_the_id_and_follow_picks_it_up_to_the_end(
    workers: Any, cli: Cli
) -> None:
    workers.start()
    started = cli("run", "executions.demonstrate", "--detach", "--input", '{"steps": 2}')
    assert started.exit_code == 0, started.output
    execution_id = started.stdout.strip()
    assert EXECUTION_ID.fullmatch(execution_id)
    followed = cli("follow", execution_id)
    assert followed.exit_code == 0, followed.output
    assert "step done: step-2" in followed.stdout
    final = cli.json("follow", execution_id)
    assert final["state"] == "succeeded" and final["output"]["steps"] == 2


def test_run_with_format_json_prints_the_final_snapshot_alone(workers: Any, cli: Cli) -> None:
    workers.start()
    snap = cli.json("run", "executions.demonstrate", "--input", '{"steps": 1}')
    assert snap["state"] == "succeeded"
    assert snap["actor"] == "cli"
    assert snap == cli.json("executions", "show", snap["id"])


def test_run_reads_its_input_from_a_file_or_stdin(workers: Any, cli: Cli, tmp_path: Any) -> None:
    workers.start()
    path = tmp_path / "input.json"
    path.write_text('{"steps": 2}')
    from_file = cli.json("run", "executions.demonstrate", "--input-file", str(path))
    from_stdin = cli(
        "run", "executions.demonstrate", "-f", "-", "--format", "json", input='{"steps": 4}'
    )
    assert from_file["output"]["steps"] == 2
    assert '"steps":4' in from_stdin.stdout


def test_a_failed_run_exits_with_its_errors_own_code(workers: Any, cli: Cli) -> None:
    workers.start()
    result = cli("run", "tests.refuse")
    assert result.exit_code == EXIT_CODE["refused"]
    assert "refused: not today" in result.stderr and "try tomorrow" in result.stderr


def test_run_takes_the_capabilitys_input_as_options_and_the_bar_shows_them(
    workers: Any, terminal: Any
) -> None:
    workers.start()
    term = terminal("run", "executions.demonstrate", "--steps", "10", "--delay-ms", "100")
    assert term.wait() == 0, term.screen
    assert "━" in term.text  # rich's bar, drawn while the ten steps took their second
    assert "10/10" in term.screen and "▶ step-10  Step 10 of 10" in term.screen
    assert "No such option" not in term.screen and '"steps": 10' in term.screen


def test_options_replace_members_of_the_input_and_are_typed_by_its_schema(
    workers: Any, cli: Cli
) -> None:
    workers.start()
    both = cli.json(
        "run", "executions.demonstrate", "--input", '{"steps": 2, "log_lines": 3}', "--steps", "4"
    )
    assert both["input"] == {"steps": 4, "delay_ms": 0, "fail_at": None, "log_lines": 3}
    assert both["output"]["steps"] == 4 and both["actor"] == "cli"
    alone = cli.json("run", "tests.sleepy", "--seconds", "0.1")
    assert alone["input"] == {"seconds": 0.1} and alone["state"] == "succeeded"

    wrong = cli("run", "executions.demonstrate", "--steps", "many")
    assert wrong.exit_code == EXIT_CODE["invalid_input"]
    assert wrong.stderr.startswith(
        "majordomus: invalid_input: /steps: 'many' is not of type 'integer'"
    )
    not_an_object = cli("run", "tests.sleepy", "--input", "[1]", "--seconds", "1")
    assert not_an_object.exit_code == EXIT_CODE["invalid_input"]
    assert "the input is not a JSON object" in not_an_object.stderr
    unknown = cli("run", "executions.demonstrate", "--nope", "1")
    assert unknown.exit_code == 2 and "No such option" in unknown.output
