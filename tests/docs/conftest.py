"""The documentation's tests: after a run that included them, the summary counts every
block of the README and the pages: run, written out as a file (run by its own test), or not
run, by reason."""

from __future__ import annotations

from typing import Any


def pytest_terminal_summary(terminalreporter: Any) -> None:
    ran = [
        report
        for key in ("passed", "failed")
        for report in terminalreporter.stats.get(key, [])
        if getattr(report, "nodeid", "").startswith("tests/docs/")
    ]
    if not ran:
        return
    from tests.docs.test_examples import tally

    counts = tally()
    write = terminalreporter.write_line
    terminalreporter.section("documentation examples")
    run = ", ".join(f"{n} {language}" for language, n in sorted(counts["run"].items()))
    write(f"run: {sum(counts['run'].values())} ({run})")
    write(f"files written out, each run by its own test: {', '.join(sorted(counts['file']))}")
    write(f"output, not examples: {sum(counts['output'].values())}")
    write(f"not run: {sum(counts['not run'].values())}")
    for reason, n in sorted(counts["not run"].items()):
        write(f"  {n} x {reason}")
