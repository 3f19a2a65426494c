"""payments-py 1.18 against the sandbox: agents, their plans, and the plan/agent associations."""

from __future__ import annotations

import pytest
from payments_py.common.payments_error import PaymentsError
from payments_py.common.types import AgentAPIAttributes, AgentMetadata, PlanMetadata
from payments_py.plans import get_fixed_credits_config

from .conftest import Sdk, credits_plan, usdc_price


def _ids(items: list[dict[str, object]], *keys: str) -> list[str]:
    return [str(next(item[k] for k in keys if item.get(k) is not None)) for item in items]


def _register(sdk: Sdk, name: str, plans: list[str]) -> str:
    answer = sdk.builder.agents.register_agent(
        AgentMetadata(name=name, description="conformance"), AgentAPIAttributes(), plans
    )
    return str(answer["agentId"])


def test_registered_agent_can_be_read_back_with_its_plan(sdk: Sdk) -> None:
    plan_id = credits_plan(sdk, "Agent plan")
    agent_id = _register(sdk, "Reader", [plan_id])
    agent = sdk.subscriber.agents.get_agent(agent_id)
    assert str(agent["id"]) == agent_id
    assert plan_id in [str(p) for p in agent["registry"]["plans"]]
    sent = sdk.recorder.last("POST", "/protocol/agents")
    assert sent.body["plans"] == [plan_id]
    assert sent.body["agentApiAttributes"] == {"authType": "none"}


def test_register_agent_and_plan_returns_both_ids_and_a_tx_hash(sdk: Sdk) -> None:
    answer = sdk.builder.agents.register_agent_and_plan(
        AgentMetadata(name="Combined"),
        AgentAPIAttributes(),
        PlanMetadata(name="Combined plan"),
        usdc_price(sdk),
        get_fixed_credits_config(20, 1),
    )
    agent_id, plan_id = str(answer["agentId"]), str(answer["planId"])
    assert isinstance(answer["txHash"], str) and answer["txHash"]
    assert plan_id in [
        str(p) for p in sdk.subscriber.agents.get_agent(agent_id)["registry"]["plans"]
    ]
    assert sdk.subscriber.plans.get_plan(plan_id)["registry"]["credits"]["amount"] in ("20", 20)


def test_my_agents_lists_only_the_callers_agents(sdk: Sdk) -> None:
    agent_id = _register(sdk, "Listed", [credits_plan(sdk)])
    mine = sdk.builder.agents.get_user_agents()
    assert agent_id in _ids(mine["agents"], "id", "agentId")
    assert {"total", "page", "offset"} <= set(mine)
    assert agent_id not in _ids(sdk.subscriber.agents.get_user_agents()["agents"], "id", "agentId")


def test_plans_of_an_agent_and_agents_of_a_plan_agree(sdk: Sdk) -> None:
    plan_id = credits_plan(sdk, "Shared")
    agent_id = _register(sdk, "Associated", [plan_id])
    plans = sdk.subscriber.agents.get_agent_plans(agent_id)
    assert plan_id in _ids(plans["plans"], "planId", "id")
    agents = sdk.subscriber.plans.get_agents_associated_to_plan(plan_id)
    assert agent_id in _ids(agents["agents"], "id", "agentId")


def test_add_then_remove_a_plan_on_an_agent(sdk: Sdk) -> None:
    first, second = credits_plan(sdk, "First"), credits_plan(sdk, "Second")
    agent_id = _register(sdk, "Mutable", [first])
    sdk.builder.agents.add_plan_to_agent(second, agent_id)
    plans = [str(p) for p in sdk.subscriber.agents.get_agent(agent_id)["registry"]["plans"]]
    assert second in plans and first in plans
    sdk.builder.agents.remove_plan_from_agent(second, agent_id)
    plans = [str(p) for p in sdk.subscriber.agents.get_agent(agent_id)["registry"]["plans"]]
    assert second not in plans and first in plans


def test_a_stranger_cannot_remove_a_plan_from_an_agent(sdk: Sdk) -> None:
    plan_id = credits_plan(sdk, "Kept")
    agent_id = _register(sdk, "Guarded agent", [plan_id])
    with pytest.raises(PaymentsError):
        sdk.subscriber.agents.remove_plan_from_agent(plan_id, agent_id)
    assert plan_id in [
        str(p) for p in sdk.subscriber.agents.get_agent(agent_id)["registry"]["plans"]
    ]


def test_unknown_agent_is_a_clear_error(sdk: Sdk) -> None:
    with pytest.raises(PaymentsError):
        sdk.subscriber.agents.get_agent("999999999999")


def test_sdk_pagination_offset_is_the_page_size(sdk: Sdk) -> None:
    from payments_py.common.types import PaginationOptions

    plan_id = credits_plan(sdk, "Paged")
    for name in ("Page A", "Page B"):
        _register(sdk, name, [plan_id])
    one = PaginationOptions(page=1, offset=1)
    agents = sdk.subscriber.plans.get_agents_associated_to_plan(plan_id, one)
    assert len(agents["agents"]) == 1
    assert int(agents["total"]) == 2
    second = sdk.subscriber.plans.get_agents_associated_to_plan(
        plan_id, PaginationOptions(page=2, offset=1)
    )
    assert _ids(second["agents"], "id", "agentId") != _ids(agents["agents"], "id", "agentId")
    mine = sdk.builder.plans.get_user_plans(pagination=one)
    assert len(mine["plans"]) == 1 and int(mine["total"]) >= 2
    assert sdk.recorder.last("GET", "/protocol/plans").query == {
        "page": "1",
        "offset": "1",
        "sortOrder": "desc",
    }


def test_update_agent_metadata_replaces_it_for_the_owner_only(sdk: Sdk) -> None:
    plan_id = credits_plan(sdk, "Updatable")
    agent_id = str(
        sdk.builder.agents.register_agent(
            AgentMetadata(name="Before"), AgentAPIAttributes(), [plan_id]
        )["agentId"]
    )
    api = AgentAPIAttributes(agent_definition_url="http://127.0.0.1:9/openapi.json")
    answer = sdk.builder.agents.update_agent_metadata(
        agent_id, AgentMetadata(name="After", tags=["updated"]), api
    )
    assert answer["success"] is True
    sent = sdk.recorder.last("PUT", f"/protocol/agents/{agent_id}")
    assert sent.body["metadataAttributes"]["name"] == "After"
    agent = sdk.builder.agents.get_agent(agent_id)
    assert agent["metadata"]["main"]["name"] == "After"
    assert agent["agentDefinitionUrl"] == "http://127.0.0.1:9/openapi.json"
    with pytest.raises(PaymentsError):
        sdk.subscriber.agents.update_agent_metadata(agent_id, AgentMetadata(name="Stolen"), api)
    assert sdk.builder.agents.get_agent(agent_id)["metadata"]["main"]["name"] == "After"
