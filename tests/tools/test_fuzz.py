"""Issue 10: a property-based fuzz of every tool's params. Whatever JSON the model sends, a tool
answers with a clear error result or a valid answer: never an exception or traceback, never an
order without ``confirm: true``, never a charge for a refused call.

Hypothesis runs in a worker thread (each example awaits the tool on a fresh loop) so that the
test's own loop stays free to serve the local sandbox. Host names never reach DNS: the query
tool's resolver is swapped for one that answers with a documentation address, which the
address check refuses before any connection.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from svc_gateway.buying import addresses as query_address
from svc_gateway.host import ToolResult
from svc_gateway.sandbox import SandboxServer
from svc_gateway.service.client import ServiceClient
from svc_gateway.tools import TOOL_NAMES, TOOLS
from tests.conftest import HostFactory, make_plan

CREDITS = 100
EXAMPLES_PER_TOOL = 40

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=24)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)
AGENT_URLS = [
    "http://127.0.0.1:9/agent",
    "http://localhost:9/a",
    "http://agent.example.com/a",
    "https://agent.example.com/a",
    "https://10.0.0.1/a",
    "https://169.254.169.254/latest",
    "https://[::]/a",
    "https://user:pw@agent.example.com/a",
    "https://agent.example.com:99999/a",
    "ftp://x",
    "",
]


def field_values(name: str, plans: list[str]) -> st.SearchStrategy[Any]:
    """JSON of any shape, mixed with values that get past validation to the service."""
    special: dict[str, st.SearchStrategy[Any]] = {
        "planId": st.sampled_from([*plans, "424242", ""]),
        "agentUrl": st.sampled_from(AGENT_URLS)
        | st.text(max_size=30).filter(lambda t: not t.lower().startswith("http")),
        "confirm": st.sampled_from([True, False, "yes", 1, "on", "true"]),
        "priceAmounts": st.sampled_from(["$1", "$1,000.00", "1000000", "$1,0000", ["5", "$2"]]),
        "tokenAddress": st.sampled_from(["0x036CbD53842c5426634e7929541eC2318f3dCF7e", "0x1"]),
        "creditsAmount": st.integers(min_value=-2, max_value=10**30),
        "address": st.sampled_from(["0x" + "ab" * 20, "0x12"]),
    }
    if name in special:
        return special[name] | json_values
    return json_values


def params_for(tool: str, plans: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    properties = TOOLS[tool].schema()["properties"]
    known = st.fixed_dictionaries(
        {}, optional={name: field_values(name, plans) for name in properties}
    )
    unknown = st.dictionaries(st.text(min_size=1, max_size=8), json_values, max_size=2)
    return st.one_of(known, st.builds(lambda a, b: {**b, **a}, known, unknown))


async def _no_dns(host: str, port: int) -> list[str]:
    """Literal addresses resolve to themselves; every name to a documentation address."""
    import ipaddress

    try:
        return [str(ipaddress.ip_address(host))]
    except ValueError:
        return ["192.0.2.1"]


@pytest.mark.timeout(600)
async def test_any_params_give_a_clear_answer_and_never_spend_unasked(
    make_host: HostFactory,
    sandbox: SandboxServer,
    subscriber: dict[str, str],
    builder_client: ServiceClient,
    builder: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(query_address, "resolver", _no_dns)
    crypto = await make_plan(builder_client, builder["address"], credits=CREDITS)
    fiat = await make_plan(builder_client, builder["address"], fiat=True, credits=CREDITS)
    gateway, _ = await make_host(subscriber["apiKey"], planId=crypto)
    orders_placed: list[str] = []
    failures: list[str] = []

    def check(tool: str, params: dict[str, Any], result: ToolResult) -> None:
        assert isinstance(result, ToolResult)
        data = result.structuredContent
        assert "Traceback" not in result.text
        if result.isError:
            error = data["error"]
            assert error["code"] != "internal_error", (tool, params, error)
            assert error["message"] and error["hint"], (tool, params, error)
            return
        if tool == "svc_orderPlan" and data.get("ordered"):
            assert params.get("confirm") is True, (tool, params)
            orders_placed.append(str(data["planId"]))
        if tool == "svc_orderFiatPlan":
            assert ("checkoutUrl" in data) == (params.get("confirm") is True), (tool, params)

    def fuzz(tool: str) -> None:
        @settings(
            max_examples=EXAMPLES_PER_TOOL,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(params=params_for(tool, [crypto, fiat]))
        def run(params: dict[str, Any]) -> None:
            result = asyncio.run(gateway.call_tool(tool, params))
            check(tool, params, result)

        try:
            run()
        except AssertionError as exc:
            failures.append(f"{tool}: {exc}")
            raise

    for tool in TOOL_NAMES:
        await asyncio.to_thread(fuzz, tool)
    assert not failures

    # conservation: credits exist only for the orders placed with confirm: true, and nothing
    # the fuzz sent was charged (every svc_queryAgent call above is refused before paying)
    public = ServiceClient(sandbox.base_url)
    try:
        for plan in (crypto, fiat):
            balance = await public.get_plan_balance(plan, subscriber["address"])
            assert balance.balance == CREDITS * orders_placed.count(plan), plan
    finally:
        await public.aclose()
