"""One declaration per capability: derived exposures, explicit absence, conflicts refused."""

from __future__ import annotations

import msgspec
import pytest

from majordomus.registry import REGISTRY, Registry, RegistryError, capability


class In(msgspec.Struct):
    pass


class Out(msgspec.Struct):
    pass


async def handler(ctx: object, inp: In) -> Out:
    return Out()


def test_an_undeclared_exposure_gets_the_derived_defaults() -> None:
    reg = Registry()
    capability("shop.restock", input=In, output=Out, kind="command", registry=reg)(handler)
    capability("shop.stock", input=In, output=Out, kind="query", registry=reg)(handler)
    restock, stock = reg.require("shop.restock"), reg.require("shop.stock")
    assert restock.exposure.mcp_tool == "majordomus_shop_restock"
    assert (restock.exposure.http_method, restock.exposure.http_path) == ("POST", "/api/v1/shop/restock")
    assert (stock.exposure.http_method, stock.exposure.http_path) == ("GET", "/api/v1/shop/stock")
    assert restock.exposure.cli_path == ("shop", "restock")


def test_absence_is_explicit() -> None:
    reg = Registry()
    capability("shop.secret", input=In, output=Out, mcp=None, http=None, cli=None, registry=reg)(handler)
    e = reg.require("shop.secret").exposure
    assert (e.mcp_tool, e.http_path, e.cli_path) == (None, None, None)


@pytest.mark.parametrize(
    "second, says",
    [
        ({"id": "shop.a"}, "declared twice"),
        ({"id": "shop.b", "mcp": "tool_a"}, "MCP tool"),
        ({"id": "shop.c", "http": ("POST", "/a")}, "route"),
        ({"id": "shop.d", "cli": ("a",)}, "command"),
    ],
)
def test_a_conflicting_declaration_is_refused_at_start_up(second: dict, says: str) -> None:
    reg = Registry()
    capability("shop.a", input=In, output=Out, mcp="tool_a", http=("POST", "/a"), cli=("a",), registry=reg)(handler)
    cap_id = second.pop("id")
    with pytest.raises(RegistryError, match=says):
        capability(cap_id, input=In, output=Out, registry=reg, **second)(handler)


def test_the_builtins_carry_the_spec_names() -> None:
    tools = {c.id: c.exposure.mcp_tool for c in REGISTRY}
    assert tools["executions.start"] == "majordomus_execution_start"
    assert tools["executions.list"] == "majordomus_executions"
    assert tools["executions.get"] == "majordomus_execution"
    assert tools["executions.events"] == "majordomus_execution_events"
    assert tools["executions.cancel"] == "majordomus_execution_cancel"
    assert tools["executions.protocol"] == "majordomus_execution_protocol"
    assert tools["executions.wait"] == "majordomus_execution_wait"
    assert tools["executions.demonstrate"] == "majordomus_demonstrate_execution"


def test_the_events_input_schema_matches_the_original_design() -> None:
    import json
    from pathlib import Path

    original = json.loads(
        (Path(__file__).resolve().parent.parent / "schemas" / "EventsInput.schema.json").read_text()
    )
    ours = REGISTRY.require("executions.events").input_schema
    assert set(ours["properties"]) == set(original["properties"])
    assert ours["required"] == original["required"]
    assert ours["additionalProperties"] is False
