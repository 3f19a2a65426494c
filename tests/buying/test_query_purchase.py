"""svc_queryAgent deciding whom to pay and with which plan (steps 3-5): each refusal word for
word, and card fields of the wrong type ignored (issue 11, mutation run of tools)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from svc_gateway.account.core import PluginCore
from svc_gateway.buying import purchase as qp
from svc_gateway.chat.failure import ToolFailure
from svc_gateway.config import PluginConfig
from svc_gateway.interop.agent_card import FoundCard
from svc_gateway.service.errors import NotFound, ServiceError
from svc_gateway.tools import query as q

URL = "https://a.example/x"


class _Service:
    def __init__(self, documents: dict[str, dict[str, Any]]) -> None:
        self.documents = documents

    async def get_agent_document(self, agent_id: str) -> dict[str, Any]:
        if agent_id not in self.documents:
            raise NotFound("no such agent", status=404)
        return self.documents[agent_id]

    async def get_plan(self, plan_id: str) -> Any:
        raise ServiceError("plans are not read here", status=503)


def core_for(documents: dict[str, dict[str, Any]], agent_id: str | None = None) -> PluginCore:
    service = _Service(documents)
    return cast(
        PluginCore,
        SimpleNamespace(
            public_client=lambda: service, config=PluginConfig(), plan_id=None, agent_id=agent_id
        ),
    )


def params(**extra: Any) -> q.QueryAgentParams:
    return q.QueryAgentParams.model_validate({"agentUrl": URL, "prompt": "p", **extra})


def agent(*urls: str, plans: tuple[str, ...] = ("p1",)) -> dict[str, Any]:
    return {"endpoints": [{"POST": url} for url in urls], "plans": list(plans)}


async def refused(core: PluginCore, p: q.QueryAgentParams, found: FoundCard | None) -> ToolFailure:
    with pytest.raises(ToolFailure) as failure:
        await qp.decide_purchase(core, p, found)
    return failure.value


async def test_an_agent_the_service_does_not_know() -> None:
    failure = await refused(core_for({}), params(agentId="a9"), None)
    assert (failure.code, failure.message, failure.hint) == (
        "unknown_agent",
        "The service knows no agent a9; nothing was paid",
        "Check agentId (or ask the agent's owner for its id).",
    )


async def test_no_agent_id_anywhere() -> None:
    failure = await refused(core_for({}), params(), None)
    assert failure.code == "unknown_agent"
    assert failure.message == (
        f"Cannot tell which agent answers at {URL}: no agentId was given and the agent card "
        "names none; nothing was paid"
    )
    assert failure.hint == (
        "Pass agentId (the id the agent registered with the service), or check agentUrl."
    )


async def test_an_unregistered_url_lists_the_registered_ones() -> None:
    long = "https://b.example/" + "y" * 600
    core = core_for({"a1": agent("https://b.example/q", long), "a2": agent()})
    failure = await refused(core, params(agentId="a1"), None)
    assert failure.code == "agent_url_not_registered"
    assert failure.message == (
        f"{URL} is not one of the endpoints agent a1 registered with the service, so paying "
        "it could hand a token to someone else; nothing was paid"
    )
    listed = "https://b.example/q, " + long[:299] + "…"  # each URL one clean line, cut
    assert failure.hint == f"The agent's registered POST endpoints: {listed}. Use one of them."
    bare = await refused(core, params(agentId="a2"), None)
    assert bare.hint == "The agent registered no endpoint; ask its owner to register the URL."


async def test_card_fields_of_the_wrong_type_are_ignored() -> None:
    core = core_for({"a1": agent(URL)}, agent_id="a1")
    card = FoundCard({"agentId": 5, "planId": 7, "schemes": ["svc:erc4337"]}, "c")
    chosen = await qp.decide_purchase(core, params(), card)
    assert (chosen.agent_id, chosen.plan_id, chosen.payment_type) == ("a1", "p1", "crypto")


async def test_an_agent_selling_nothing_is_named() -> None:
    failure = await refused(core_for({"a1": agent(URL, plans=())}), params(agentId="a1"), None)
    assert failure.message == "Agent a1 sells no plan, so there is nothing to pay it with"


async def test_a_card_for_another_agent_keeps_its_hint() -> None:
    core = core_for({"a1": agent(URL)})
    card = FoundCard({"agentId": "a2", "schemes": ["svc:erc4337"]}, "c")
    failure = await refused(core, params(agentId="a1"), card)
    assert failure.code == "agent_mismatch"
    assert failure.hint == "Check agentUrl and agentId: you may be talking to a different agent."


@pytest.mark.parametrize("configured", ["a1", "a-gone"])
async def test_the_configured_agent_is_not_a_fallback_for_a_url_it_never_registered(
    configured: str,
) -> None:
    """Issue 14 (P15): an unregistered URL with no agentId named the configured agent as if the
    user had meant it; now the error names the URL (a configured agent the service does not
    know is no better a guess)."""
    core = core_for({"a1": agent("https://b.example/q")}, agent_id=configured)
    failure = await refused(core, params(), None)
    assert failure.code == "unknown_agent"
    assert URL in failure.message and configured not in failure.message
    assert "agentId" in failure.hint and "agentUrl" in failure.hint
    assert configured not in failure.hint


async def test_the_configured_agent_is_used_at_its_own_url_and_named_ids_keep_their_errors() -> (
    None
):
    core = core_for({"a1": agent(URL)}, agent_id="a1")
    assert (await qp.decide_purchase(core, params(), None)).agent_id == "a1"
    elsewhere = core_for({"a1": agent("https://b.example/q")}, agent_id="a1")
    named = await refused(elsewhere, params(agentId="a1"), None)
    assert named.code == "agent_url_not_registered"  # the user named it: say what it registered
    by_card = await refused(elsewhere, params(), FoundCard({"agentId": "a1"}, "c"))
    assert by_card.code == "agent_url_not_registered"
    gone = await refused(core_for({}, agent_id="a1"), params(agentId="a1"), None)
    assert gone.message == "The service knows no agent a1; nothing was paid"
