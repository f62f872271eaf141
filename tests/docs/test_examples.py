"""Every example of the README and of the documentation's pages, run as a reader runs it.

From one folder holding the tutorial's `greetings.py`, with a `majordomus dev` of its own
serving it there (`MAJORDOMUS_CAPABILITIES=greetings`, on the suite's Redis): each page's
shell blocks run in order in one bash session (so `X=$(...)` carries to the next block),
`localhost:8000` standing for that dev's address, stopping at the first command that fails
or answers an error envelope; each Python block runs as a script of its own; each YAML
block is parsed. The files a page writes out are checked to be run by their own tests, and
the README's copies to be the pages' own. A block that is not run says why
(`<!-- not run: why -->`); the reasons are counted in the run's summary.
"""

from __future__ import annotations

import collections
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as redis_sync
import yaml

from tests.conftest import ROOT, DevProcess, _redis_url, running_dev
from tests.docs.examples import FILES_RUN_BY, Block, blocks, every_block, marked_block, pages
from tests.test_readme_capability import CONSOLE_SCRIPT, user_env

RUN_LANGUAGES = {"sh", "python", "yaml"}
OUTPUT_LANGUAGES = {"text"}
ERROR_ENVELOPE = re.compile(r'\{"error":\s*\{')
MARK = "@@ block "


def runnable(block: Block, language: str) -> bool:
    return block.language == language and block.marker in (None, "run", "example")


def shell_pages() -> list[Path]:
    return [page for page in pages() if any(runnable(b, "sh") for b in blocks(page))]


def python_blocks() -> list[Block]:
    return [b for b in every_block() if runnable(b, "python")]


def tally() -> dict[str, collections.Counter[str]]:
    """What happens to every block: run (by language), written out as a file, or not run
    (by reason); output blocks are not examples."""
    counts: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for block in every_block():
        if block.language in OUTPUT_LANGUAGES:
            counts["output"][block.language] += 1
        elif block.marker == "not run":
            counts["not run"][block.argument] += 1
        elif block.marker == "file":
            counts["file"][block.argument] += 1
        else:
            counts["run"][block.language] += 1
    return counts


def test_every_block_is_run_or_says_why() -> None:
    for block in every_block():
        assert block.language in RUN_LANGUAGES | OUTPUT_LANGUAGES, (
            f"{block.where}: a ```{block.language or '(no language)'} block: fence it as one of "
            f"{sorted(RUN_LANGUAGES | OUTPUT_LANGUAGES)}"
        )
        if block.marker == "not run":
            assert len(block.argument) > 10, f"{block.where}: say why it is not run"
        if block.marker == "run":
            assert block.seconds, f"{block.where}: `<!-- run: for N s (why) -->`"
        if block.marker == "file":
            assert block.argument in FILES_RUN_BY, (
                f"{block.where}: no test runs the file {block.argument}; name it in FILES_RUN_BY"
            )
    counts = tally()
    assert sum(counts["run"].values()) >= 20, counts
    assert set(counts["file"]) == set(FILES_RUN_BY), counts


def test_the_readme_copies_of_files_are_the_pages_own() -> None:
    copies = [b for b in blocks(ROOT / "README.md") if b.marker in ("file", "example")]
    assert copies, "the README shows no capability"
    for copy in copies:
        assert copy.text == marked_block(copy.argument), f"{copy.where} differs from the docs"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    made = tmp_path_factory.mktemp("reader")
    (made / "greetings.py").write_text(marked_block("greetings.py"))
    return made


@pytest.fixture(scope="module")
def reader_env(folder: Path) -> dict[str, str]:
    redis_url = _redis_url()
    client = redis_sync.Redis.from_url(redis_url)
    client.flushdb()
    client.close()
    env = user_env(redis_url)
    runtime = folder / "runtime"  # dev's record of itself, kept from the user's own
    runtime.mkdir(mode=0o700)
    env.update(
        {
            "XDG_RUNTIME_DIR": str(runtime),
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
            "PYTHONPATH": str(folder),
            "NO_COLOR": "1",
        }
    )
    return env


@pytest.fixture(scope="module")
def dev(folder: Path, reader_env: dict[str, str]) -> Iterator[DevProcess]:
    with running_dev(reader_env, [str(CONSOLE_SCRIPT)], cwd=folder) as running:
        yield running


def session_script(page: Path, folder: Path, address: str) -> tuple[str, list[Block]]:
    """One bash script of a page's runnable shell blocks, each announced by a mark line."""
    run = [b for b in blocks(page) if runnable(b, "sh")]
    lines = ["set -a -e -o pipefail"]
    for index, block in enumerate(run):
        text = block.text.replace("localhost:8000", address).replace("127.0.0.1:8000", address)
        lines.append(f"printf '\\n{MARK}{index}\\n'; echo '{MARK}{index}' >&2")
        if block.seconds:
            script = folder / f"{page.stem}-{index}.sh"
            script.write_text(text)
            lines.append(f"timeout {block.seconds:g} bash {script} || [ $? -eq 124 ]")
        else:
            lines.append(text)
    return "\n".join(lines) + "\n", run


@pytest.mark.process
@pytest.mark.slow
@pytest.mark.parametrize("page", shell_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_shell_examples_run(
    page: Path, folder: Path, reader_env: dict[str, str], dev: DevProcess
) -> None:
    script, run = session_script(page, folder, dev.url.removeprefix("http://"))
    done = subprocess.run(
        ["bash", "-c", script],
        cwd=folder,
        env=reader_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    reached = [int(m) for m in re.findall(rf"^{MARK}(\d+)$", done.stdout, re.M)]
    last = run[reached[-1]] if reached else None
    assert done.returncode == 0, (
        f"{last.where if last else page}: exit {done.returncode}\n{done.stdout[-3000:]}\n"
        f"{done.stderr[-3000:]}"
    )
    assert reached == list(range(len(run))), (reached, done.stdout[-3000:])
    for index, said in enumerate(done.stdout.split(MARK)[1:]):
        assert not ERROR_ENVELOPE.search(said), f"{run[index].where} answered an error:\n{said}"


@pytest.mark.process
@pytest.mark.slow
@pytest.mark.parametrize("block", python_blocks(), ids=lambda b: b.where)
def test_the_python_examples_run(block: Block, folder: Path, reader_env: dict[str, str]) -> None:
    script = folder / f"example_{block.page.stem}_{block.line}.py"
    script.write_text(block.text)
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=folder,
        env=reader_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, f"{block.where}:\n{done.stdout}\n{done.stderr}"


@pytest.mark.parametrize(
    "block",
    [b for b in every_block() if runnable(b, "yaml")],
    ids=lambda b: b.where,
)
def test_the_yaml_examples_parse(block: Block) -> None:
    assert isinstance(yaml.safe_load(block.text), dict), block.where


def test_the_readme_is_a_front_door_whose_links_lead_somewhere() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 300, "the README is the front door: at most 300 lines"
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [t for t in targets if not t.startswith(("http://", "https://"))]
    assert "docs/index.md" in local
    for target in local:
        assert (ROOT / target).exists(), f"the README links to {target}, which is not there"
