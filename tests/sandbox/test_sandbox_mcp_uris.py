"""MCP logical URIs as agent endpoints (issue 19): ``mcp://<server>/tools/<name>``, resources,
prompts and ``*``, matched for v3 tokens the way the SDKs' MCP paywall sends them
(``payments_py/mcp/utils/logical_url.py``: the tool's arguments ride in the query; POST)."""

from __future__ import annotations

from .support import Actor, Api, envelope
from .test_sandbox_tokens_v3 import mint_v3

TOOL = "mcp://weather/tools/forecast"
ENDPOINTS = [
    {"POST": TOOL},
    {"POST": "mcp://weather/resources/*"},
    {"POST": "mcp://weather/prompts/daily"},
    {"POST": "mcp://calendar/*"},
]


async def shop(api: Api, owner: Actor, buyer: Actor) -> tuple[str, str]:
    plan_id = await api.plan(owner, credits=10)
    assert (await api.order(buyer, plan_id)).status_code == 200
    return plan_id, await api.agent(owner, [plan_id], endpoints=ENDPOINTS)


async def test_an_agent_registers_mcp_logical_uris_and_reads_them_back(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    _, agent_id = await shop(api, owner, buyer)
    agent = (await api.http.get(f"/protocol/agents/{agent_id}")).json()
    assert agent["endpoints"] == ENDPOINTS


async def test_v3_tokens_mint_for_registered_mcp_uris_only(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    plan_id, agent_id = await shop(api, owner, buyer)
    for url in (TOOL, "mcp://weather/resources/today", "mcp://weather/prompts/daily"):
        assert (await mint_v3(api, buyer, plan_id, agent_id, url=url)).status_code == 200, url
    assert (await mint_v3(api, buyer, plan_id, agent_id, url="mcp://calendar/tools/add")).is_success
    for url in ("mcp://weather/tools/radar", "mcp://weather/prompts/weekly", "mcp://other/x"):
        refused = await mint_v3(api, buyer, plan_id, agent_id, url=url)
        assert refused.status_code == 400 and refused.json()["code"] == "BCK.PROTOCOL.0031", url


async def test_a_tool_call_with_its_arguments_verifies_and_settles_against_its_v3_token(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    plan_id, agent_id = await shop(api, owner, buyer)
    token = (await mint_v3(api, buyer, plan_id, agent_id, url=TOOL)).json()["accessToken"]
    call = envelope(plan_id, agent_id=agent_id, url=TOOL + "?city=Paris&days=3", verb="POST")
    verified = await api.verify(owner, token, plan_id, paid=call)
    assert verified["isValid"] is True, verified
    assert (verified["urlMatching"], verified["agentRequest"]["verbMatching"]) == (TOOL, "POST")
    other_tool = envelope(plan_id, agent_id=agent_id, url="mcp://calendar/tools/add", verb="POST")
    refused = await api.verify(owner, token, plan_id, paid=other_tool)
    assert refused["isValid"] is False and "another resource URL" in refused["invalidReason"]
    other_server = envelope(plan_id, agent_id=agent_id, url="mcp://weather2/tools/forecast")
    body = {"paymentRequired": other_server, "x402AccessToken": token, "maxAmount": "1"}
    unlisted = await api.http.post("/x402/verify", json=body, headers=owner.headers)
    assert unlisted.status_code == 400 and unlisted.json()["code"] == "BCK.PROTOCOL.0031"
    settled = await api.settle_answer(owner, token, plan_id, verified["agentRequestId"], paid=call)
    assert settled.json()["success"] is True
    assert await api.credits(plan_id, buyer) == 9


async def test_an_envelope_without_a_verb_is_not_checked_against_the_tokens_verb(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    """The SDK's MCP paywall verifies with no httpVerb; a named verb must still match."""
    plan_id, agent_id = await shop(api, owner, buyer)
    token = (await mint_v3(api, buyer, plan_id, agent_id, url=TOOL)).json()["accessToken"]
    no_verb = envelope(plan_id, agent_id=agent_id, url=TOOL + "?city=Oslo")
    assert (await api.verify(owner, token, plan_id, paid=no_verb))["isValid"] is True
    odd = envelope(plan_id, agent_id=agent_id, url=TOOL, verb="POST")
    odd["accepts"][0]["extra"]["httpVerb"] = 5
    refused = await api.verify(owner, token, plan_id, paid=odd)
    assert refused["invalidReason"] == "the access token is bound to another HTTP verb"
