"""compose.yaml, the Dockerfile and the settings reference page, checked against the CLI's own
commands and the `Settings` type, so a deployment cannot drift from the code it runs.
(No Docker engine runs here: the files are parsed, not started.)"""

from __future__ import annotations

import re
import tomllib
from typing import Any

import pytest
import typer
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from majordomus.cli import app
from majordomus.cli.tree import register
from majordomus.config import ENV_PREFIX, Settings
from tests.conftest import ROOT


class UniqueKeys(yaml.SafeLoader):
    """YAML as compose reads it: a key given twice in one mapping is an error (PyYAML alone
    keeps the last), merged keys (`<<:`) aside."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        keys = [
            self.construct_object(key, deep=True)
            for key, _ in node.value
            if key.tag != "tag:yaml.org,2002:merge"
        ]
        twice = sorted({str(k) for k in keys if keys.count(k) > 1})
        if twice:
            raise yaml.constructor.ConstructorError(
                None, None, f"keys given twice: {twice}", node.start_mark
            )
        return super().construct_mapping(node, deep)


def compose_of(text: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.load(text, Loader=UniqueKeys)  # noqa: S506  a SafeLoader
    return loaded


COMPOSE_TEXT = (ROOT / "compose.yaml").read_text()
COMPOSE = compose_of(COMPOSE_TEXT)
SERVICES: dict[str, Any] = COMPOSE["services"]
SUBSTITUTION = re.compile(r"^\$\{(?P<name>[A-Z0-9_]+)(?::-(?P<default>.*)|:\?(?P<required>.+))?\}$")
"""`${NAME}`, `${NAME:-default}`, or `${NAME:?why}`: required, compose stops saying why."""


def cli_command(name: str) -> Any:
    register(app)
    group: Any = typer.main.get_command(app)
    assert name in group.commands, f"'majordomus {name}' is no command of the CLI"
    return group.commands[name]


def options_of(command: Any) -> set[str]:
    return {opt for param in command.params for opt in param.opts if opt.startswith("--")}


def check_command(argv: list[str]) -> dict[str, str]:
    """`majordomus <command> --opt value ...` names a real command and real options of it."""
    assert argv[0] == "majordomus"
    command = cli_command(argv[1])
    given = dict(zip(argv[2::2], argv[3::2], strict=True))
    assert set(given) <= options_of(command), (argv, options_of(command))
    return given


def test_compose_runs_redis_the_api_and_workers() -> None:
    assert set(SERVICES) == {"redis", "api", "worker"}


def test_redis_keeps_an_append_only_file_on_a_volume_and_reports_its_health() -> None:
    redis = SERVICES["redis"]
    command = redis["command"]
    assert command[0] == "redis-server"
    assert command[command.index("--appendonly") + 1] == "yes"
    [volume] = redis["volumes"]
    name, path = volume.split(":")[:2]
    assert path == "/data" and name in COMPOSE["volumes"]
    assert "redis-cli" in redis["healthcheck"]["test"]


def test_the_api_runs_serve_on_all_interfaces_with_its_port_published() -> None:
    api = SERVICES["api"]
    given = check_command(api["command"])
    assert given["--host"] == "0.0.0.0"
    [published] = api["ports"]
    assert published.rsplit(":", 1)[1] == given["--port"]
    assert api["depends_on"]["redis"]["condition"] == "service_healthy"
    assert "/api/v1/live" in " ".join(api["healthcheck"]["test"])


def test_the_api_beyond_loopback_requires_a_token_rather_than_serving_open() -> None:
    # `serve --host 0.0.0.0` without MAJORDOMUS_API_TOKEN refuses to start: compose asks for
    # the token up front (`${...:?why}`) instead of passing --insecure-no-token.
    api = SERVICES["api"]
    assert "--insecure-no-token" not in api["command"]
    matched = SUBSTITUTION.match(api["environment"]["MAJORDOMUS_API_TOKEN"])
    assert matched is not None and matched["name"] == "MAJORDOMUS_API_TOKEN"
    assert matched["required"] and "MAJORDOMUS_API_TOKEN" in matched["required"]
    assert "MAJORDOMUS_API_TOKEN" not in SERVICES["worker"]["environment"]


def test_the_worker_runs_worker_and_can_be_scaled() -> None:
    worker = SERVICES["worker"]
    check_command(worker["command"])
    assert worker["command"][1] == "worker"
    # `docker compose up --scale worker=N` refuses a fixed container name or host port.
    assert "container_name" not in worker and "ports" not in worker


ALTERNATIVE_LINE = re.compile(
    r"^(?P<indent> *)# (?P<yaml>- \S+|MAJORDOMUS_[A-Z0-9_]+: .+|[a-z_]+: \[.*\])$"
)
"""A commented-out line of YAML that compose.yaml offers to uncomment (a list item, a
setting, a key with a list), as opposed to a comment in prose."""


def uncommented(text: str) -> str:
    """compose.yaml with every alternative it offers taken, as its comments say to."""
    lines = []
    for line in text.splitlines():
        matched = ALTERNATIVE_LINE.match(line)
        lines.append(f"{matched['indent']}{matched['yaml']}" if matched else line)
    return "\n".join(lines) + "\n"


def test_the_workers_metrics_alternative_is_valid_compose_once_uncommented() -> None:
    # Uncommented as compose.yaml says, it is still one command (not two `command:` keys)
    # of real options, and the port a setting.
    assert uncommented(COMPOSE_TEXT) != COMPOSE_TEXT, "compose.yaml offers no alternative"
    worker = compose_of(uncommented(COMPOSE_TEXT))["services"]["worker"]
    given = check_command(worker["command"])
    assert given == {"--metrics-host": "0.0.0.0"}
    port = worker["environment"]["MAJORDOMUS_METRICS_PORT"]
    assert Settings.from_env({"MAJORDOMUS_METRICS_PORT": str(port)}).metrics_port == 9100
    assert SERVICES["worker"]["command"] == ["majordomus", "worker"]


def test_a_key_given_twice_is_refused_as_compose_refuses_it() -> None:
    with pytest.raises(yaml.constructor.ConstructorError, match="given twice"):
        compose_of("worker:\n  command: [a]\n  command: [b]\n")


def environments(services: dict[str, Any] = SERVICES) -> list[tuple[str, str, str]]:
    return [
        (service, name, str(value))
        for service, spec in services.items()
        if service != "redis"
        for name, value in spec["environment"].items()
    ]


@pytest.mark.parametrize(
    ("service", "name", "value"),
    sorted(
        set(environments()) | set(environments(compose_of(uncommented(COMPOSE_TEXT))["services"]))
    ),
)
def test_every_variable_is_a_setting_and_every_default_is_the_settings_own(
    service: str, name: str, value: str
) -> None:
    assert name.startswith(ENV_PREFIX)
    field = name.removeprefix(ENV_PREFIX).lower()
    assert field in Settings.__struct_fields__, f"{service}: {name} is no setting"
    matched = SUBSTITUTION.match(value)
    if matched is None:
        return  # a fixed value of this deployment (the Redis URL)
    assert matched["name"] == name, f"{service}: {name} is filled from another variable"
    if matched["required"]:
        return  # no default: compose refuses to start without it
    default = matched["default"] or ""
    from_compose = Settings.from_env({name: default}) if default else Settings()
    assert getattr(from_compose, field) == getattr(Settings(), field), (service, name, default)


def test_the_api_and_the_workers_share_one_redis_and_one_set_of_capabilities() -> None:
    api, worker = SERVICES["api"]["environment"], SERVICES["worker"]["environment"]
    assert api["MAJORDOMUS_REDIS_URL"] == worker["MAJORDOMUS_REDIS_URL"] == "redis://redis:6379/0"
    assert api["MAJORDOMUS_CAPABILITIES"] == worker["MAJORDOMUS_CAPABILITIES"]
    shared = set(api) & set(worker)
    assert all(api[k] == worker[k] for k in shared)


def test_docker_waits_out_a_workers_graceful_stop_before_killing_it() -> None:
    worker = SERVICES["worker"]
    grace = int(str(worker["stop_grace_period"]).removesuffix("s"))
    env = worker["environment"]

    def default_of(name: str) -> float:
        matched = SUBSTITUTION.match(str(env[name]))
        assert matched is not None
        return float(matched["default"])

    assert worker["stop_signal"] == "SIGTERM"
    assert grace > default_of("MAJORDOMUS_SHUTDOWN_GRACE") + default_of("MAJORDOMUS_CANCEL_GRACE")


def test_the_image_installs_every_package_the_project_ships() -> None:
    # Built once: the worker runs the image the api service builds.
    assert SERVICES["api"]["build"] == "."
    assert "build" not in SERVICES["worker"]
    assert SERVICES["worker"]["image"] == SERVICES["api"]["image"]
    dockerfile = (ROOT / "Dockerfile").read_text()
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    tops = {p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]}
    for package in sorted(tops):
        assert f"COPY {package} ./{package}" in dockerfile
    # The image runs on uvloop and httptools, as `fast` brings them; nothing else extra,
    # and nothing but what the lock file pins (`test_the_lock_file_pins_...`).
    assert "RUN pip install --no-deps -r requirements.lock" in dockerfile
    assert 'RUN pip install --no-deps ".[server,fast]"' in dockerfile
    assert dockerfile.index("requirements.lock") < dockerfile.index("COPY majordomus")
    assert set(pyproject["project"]["optional-dependencies"]["fast"]) <= set(
        pyproject["project"]["optional-dependencies"]["test"]
    ), "the suite runs what the image runs"
    assert 'CMD ["majordomus", "serve", "--host", "0.0.0.0", "--port", "8000"]' in dockerfile


def test_the_settings_page_carries_the_table_generated_from_settings() -> None:
    # The table is put in the page as the site builds (docs/hooks.py), never written twice;
    # tests/docs/test_site.py reads it in the built page.
    page = (ROOT / "docs" / "reference" / "settings.md").read_text()
    assert "\n<!-- generated: settings -->\n" in page
    assert "| `MAJORDOMUS_REDIS_URL` |" not in page, "a settings table written by hand"


def image_python() -> str:
    """The Python version of the image (`FROM python:3.12-slim`: `3.12`)."""
    matched = re.search(r"^FROM python:(\d+\.\d+)", (ROOT / "Dockerfile").read_text(), re.M)
    assert matched is not None, "the Dockerfile's base is no python image"
    return matched[1]


def locked() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, _, version = line.partition("==")
        assert version, f"requirements.lock: {line!r} is no exact pin"
        pins[canonicalize_name(name)] = version.strip()
    return pins


def test_the_lock_file_pins_every_dependency_of_the_image_at_a_version_it_accepts() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = pyproject["project"]
    extras = project["optional-dependencies"]
    wanted = [*project["dependencies"], *extras["server"], *extras["fast"]]
    environment = {
        "python_version": image_python(),
        "python_full_version": f"{image_python()}.0",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
        "implementation_name": "cpython",
    }
    pins = locked()
    assert "majordomus" not in pins, "the lock pins dependencies, not majordomus itself"
    for text in wanted:
        requirement = Requirement(text)
        if requirement.marker and not requirement.marker.evaluate(environment):
            continue
        name = canonicalize_name(requirement.name)
        assert name in pins, f"requirements.lock pins no {requirement.name} ({text})"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"requirements.lock pins {name}=={pins[name]}, outside {text}"
        )
