"""A metered tool's failure comes only from the host's error channel, never from its content:
a tool whose output the user controls (``run_code`` printing ``{"error": "none"}``) is charged
like any other answer, through the host contract and through Hermes's ``tool_execution``
middleware with Hermes's own tool registry; a tool that raises or answers with an error is not
charged, and the model gets that failure, never the tool's output (an answer printed before exit
1 would be given away). Against the sandbox, each ending with conservation (granted = balance +
burned, per payer)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from svc_gateway.host import ToolResult
from svc_gateway.hosts.hermes_adapters import result_json
from svc_gateway.hosts.hermes_users import Senders, make_tool_middleware
from svc_gateway.selling.ways_in.metering import ToolMeter
from svc_gateway.service.client import ServiceClient
from tests.conftest import HostFactory
from tests.hosts.hosted.test_metered_tools import GRANTED, balance, metering_plan, user_with_credits

pytestmark = pytest.mark.asyncio

PRINTED = '{"error": "none", "stdout": "the answer is 42"}'  # the user's own program output
ANSWER = "the answer is 42"  # what a seller's tool sells: a failed call never gives it away


async def host(make_host: HostFactory, builder: dict[str, str], client: ServiceClient) -> Any:
    plan = await metering_plan(client, builder["address"])
    gateway, handle = await make_host(
        builder["apiKey"],
        perUserAccounts=True,
        planId=plan,
        meteredTools={"run_code": 2, "lookup": 1, "flaky": 3, "broken": 3, "hermes_*": 2},
        defaultSpendingLimitCents=1,  # no automatic top-up
    )
    alice = await user_with_credits(gateway, "alice", plan)
    return gateway, handle, plan, alice


async def conserved(client: ServiceClient, plan: str, payer: str, meter: ToolMeter) -> None:
    burned = meter.flow.stats.credits_settled
    assert await balance(client, plan, payer) + burned == GRANTED  # conservation


async def test_a_tool_printing_an_error_key_is_charged_and_only_real_failures_are_free(
    make_host: HostFactory, builder: dict[str, str], builder_client: ServiceClient
) -> None:
    gateway, handle, plan, alice = await host(make_host, builder, builder_client)

    async def run_code(_arguments: dict[str, Any]) -> str:
        return PRINTED

    async def lookup(_arguments: dict[str, Any]) -> dict[str, Any]:
        return {"error": "no such user", "query": "bob"}  # found nothing: still an answer

    async def flaky(_arguments: dict[str, Any]) -> ToolResult:
        return ToolResult.error("upstream_down", "the service is down", "retry")

    async def broken(_arguments: dict[str, Any]) -> str:
        raise RuntimeError("tool bug")

    for name, tool in (("run_code", run_code), ("lookup", lookup)):
        gateway.add_host_tool(name, tool)
    gateway.add_host_tool("flaky", flaky)
    gateway.add_host_tool("broken", broken)
    printed = await gateway.call_host_tool("run_code", {"code": "print(...)"}, sender="alice")
    looked = await gateway.call_host_tool("lookup", {"q": "bob"}, sender="alice")
    assert printed == PRINTED and looked == {"error": "no such user", "query": "bob"}
    assert await balance(builder_client, plan, alice) == GRANTED - 3  # both charged
    failed = await gateway.call_host_tool("flaky", {}, sender="alice")
    assert isinstance(failed, ToolResult) and failed.isError  # delivered as the failure it is
    broke = await gateway.call_host_tool("broken", {}, sender="alice")
    assert broke.isError and "RuntimeError: tool bug" in broke.structuredContent["error"]["message"]
    assert await balance(builder_client, plan, alice) == GRANTED - 3  # failures: free
    meter: ToolMeter = handle.extras["meter"]
    assert meter.flow.stats.credits_settled == 3 and meter.flow.stats.handler_failures == 2
    await conserved(builder_client, plan, alice, meter)


async def test_a_failed_tool_gives_the_model_its_failure_never_its_output(
    make_host: HostFactory, builder: dict[str, str], builder_client: ServiceClient
) -> None:
    gateway, handle, plan, alice = await host(make_host, builder, builder_client)

    async def run_code(_arguments: dict[str, Any]) -> ToolResult:  # printed it, then exit 1
        error = {"code": "exit_1", "message": "the program exited with status 1"}
        return ToolResult(structuredContent={"error": error, "stdout": ANSWER}, isError=True)

    async def flaky(_arguments: dict[str, Any]) -> ToolResult:  # the answer in its content
        content = [{"type": "text", "text": ANSWER}]
        return ToolResult(structuredContent={"error": "exit 1"}, isError=True, content=content)

    async def broken(_arguments: dict[str, Any]) -> str:  # raised after producing its output
        raise RuntimeError(f"exit status 1\n{ANSWER}")

    for name, tool in (("run_code", run_code), ("flaky", flaky), ("broken", broken)):
        gateway.add_host_tool(name, tool)
    for name in ("run_code", "flaky", "broken"):
        failed = await gateway.call_host_tool(name, {"code": "print(42)"}, sender="alice")
        assert isinstance(failed, ToolResult) and failed.isError, failed
        assert ANSWER not in json.dumps(failed.to_dict()), failed  # the failure, not the output
        error = failed.structuredContent["error"]
        assert error["code"] == "tool_failed" and "Nothing was charged" in error["message"]
    assert await balance(builder_client, plan, alice) == GRANTED  # nothing charged
    meter: ToolMeter = handle.extras["meter"]
    assert meter.flow.stats.credits_settled == 0 and meter.flow.stats.handler_failures == 3
    await conserved(builder_client, plan, alice, meter)


@pytest.fixture
def hermes_tools() -> Iterator[Any]:
    """Two tools in Hermes's own registry (in this process): one prints what its user wrote,
    two raise (the registry turns the exception into error JSON for the model)."""
    registry_module = pytest.importorskip("tools.registry")
    registry = registry_module.registry
    schema = {"type": "object", "properties": {}}

    def printing(_args: dict[str, Any], **_kwargs: Any) -> str:
        return PRINTED

    def raising(_args: dict[str, Any], **_kwargs: Any) -> str:
        raise RuntimeError("sandbox crashed")

    def exiting(_args: dict[str, Any], **_kwargs: Any) -> str:
        raise RuntimeError(f"exit status 1\n{ANSWER}")  # its output in the exception's text

    names = {"hermes_run_code": printing, "hermes_crash": raising, "hermes_exit": exiting}
    for name, handler in names.items():
        registry.register(
            name=name,
            toolset="svc_tests",
            schema={"name": name, "description": name, "parameters": schema},
            handler=handler,
            description=name,
        )
    yield registry
    for name in names:
        registry.deregister(name)


async def test_hermes_charges_a_printed_error_key_and_not_what_its_registry_caught(
    make_host: HostFactory,
    builder: dict[str, str],
    builder_client: ServiceClient,
    hermes_tools: Any,
) -> None:
    _gateway, handle, plan, alice = await host(make_host, builder, builder_client)
    meter: ToolMeter = handle.extras["meter"]
    senders = Senders()
    senders.remember("session-1", "alice", "terminal")  # the reference host's channel
    middleware = make_tool_middleware(meter, senders, handle.runtime, result_json)

    def call(name: str, call_id: str) -> Any:
        return middleware(
            tool_name=name,
            args={},
            next_call=lambda args: hermes_tools.dispatch(name, args),
            session_id="session-1",
            tool_call_id=call_id,
        )

    printed = await asyncio.to_thread(call, "hermes_run_code", "call-1")
    assert printed == PRINTED
    assert await balance(builder_client, plan, alice) == GRANTED - 2
    crashed = await asyncio.to_thread(call, "hermes_crash", "call-2")
    assert "RuntimeError: sandbox crashed" in json.loads(crashed)["error"]["message"]
    assert await balance(builder_client, plan, alice) == GRANTED - 2  # not charged
    assert meter.flow.stats.credits_settled == 2 and meter.flow.stats.handler_failures == 1
    await conserved(builder_client, plan, alice, meter)


async def test_hermes_gives_the_model_a_failed_tools_failure_never_its_output(
    make_host: HostFactory,
    builder: dict[str, str],
    builder_client: ServiceClient,
    hermes_tools: Any,
) -> None:
    _gateway, handle, plan, alice = await host(make_host, builder, builder_client)
    meter: ToolMeter = handle.extras["meter"]
    senders = Senders()
    senders.remember("session-1", "alice", "terminal")
    middleware = make_tool_middleware(meter, senders, handle.runtime, result_json)
    answered = await asyncio.to_thread(
        middleware,
        tool_name="hermes_exit",
        args={},
        next_call=lambda args: hermes_tools.dispatch("hermes_exit", args),
        session_id="session-1",
        tool_call_id="call-1",
    )
    assert ANSWER not in answered  # Hermes's registry put it in its error text; not passed on
    error = json.loads(answered)["error"]
    assert error["code"] == "tool_failed" and "RuntimeError: exit status 1" in error["message"]
    assert await balance(builder_client, plan, alice) == GRANTED  # nothing charged
    assert meter.flow.stats.credits_settled == 0 and meter.flow.stats.handler_failures == 1
    await conserved(builder_client, plan, alice, meter)
