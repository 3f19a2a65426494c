"""Agents, plan associations and the DELETE association route."""

from __future__ import annotations

from .support import Actor, Api, plan_body


async def test_agent_endpoints_are_kept_as_registered(api: Api, owner: Actor) -> None:
    plan_id = await api.plan(owner)
    agent_id = await api.agent(
        owner,
        [plan_id],
        endpoints=[
            {"POST": "https://agent.example/run"},
            {"verb": "get", "url": "mcp://a/tools/*"},
        ],
        authType="bearer",
        token="agent-secret-token",
    )
    assert agent_id.startswith("did:svc:") and len(agent_id) == len("did:svc:") + 32
    agent = (await api.http.get(f"/protocol/agents/{agent_id}")).json()
    assert agent["id"] == agent_id and agent["owner"] == owner.address
    assert agent["metadata"]["main"]["name"] == "Agent"
    assert agent["registry"]["plans"] == [plan_id]
    assert agent["endpoints"] == [
        {"POST": "https://agent.example/run"},
        {"verb": "get", "url": "mcp://a/tools/*"},
    ]
    assert "agent-secret-token" not in str(agent)


async def test_agent_plans_must_exist_and_be_yours(api: Api, owner: Actor, buyer: Actor) -> None:
    mine = await api.plan(owner)
    theirs = await api.plan(buyer)
    body = {"metadataAttributes": {"name": "A"}, "agentApiAttributes": {}, "plans": [theirs]}
    foreign = await api.http.post("/protocol/agents", json=body, headers=owner.headers)
    assert foreign.status_code == 403
    body["plans"] = ["424242"]
    unknown = await api.http.post("/protocol/agents", json=body, headers=owner.headers)
    assert unknown.status_code == 404
    body["plans"] = [mine]
    body["agentApiAttributes"] = {"endpoints": [{"FETCH": "https://x"}]}
    bad_endpoint = await api.http.post("/protocol/agents", json=body, headers=owner.headers)
    assert bad_endpoint.status_code == 400
    assert (await api.http.post("/protocol/agents", json=body)).status_code == 401


async def test_register_agent_and_plan_in_one_call(api: Api, owner: Actor) -> None:
    plan = plan_body(owner, name="Bundle")
    body = {
        "plan": plan,
        "agent": {
            "metadataAttributes": {"name": "Bundled agent"},
            "agentApiAttributes": {"endpoints": [{"POST": "http://127.0.0.1:8402/svc/agent"}]},
        },
    }
    answer = await api.http.post("/protocol/agents/plans", json=body, headers=owner.headers)
    assert answer.status_code == 201, answer.text
    data = answer.json()["data"]
    assert answer.json()["txHash"].startswith("0x")
    agent = (await api.http.get(f"/protocol/agents/{data['agentId']}")).json()
    assert agent["registry"]["plans"] == [data["planId"]]
    body["plan"] = {**plan, "creditsConfig": {"amount": "x"}}
    refused = await api.http.post("/protocol/agents/plans", json=body, headers=owner.headers)
    assert refused.status_code == 400
    mine = await api.http.get("/protocol/agents", headers=owner.headers)
    assert mine.json()["total"] == 1  # the refused call created nothing


async def test_association_lists_page_with_offset_or_page_size(api: Api, owner: Actor) -> None:
    plan_ids = [await api.plan(owner, name=f"P{i}") for i in range(3)]
    agent_ids = [await api.agent(owner, plan_ids) for _ in range(3)]
    by_offset = await api.http.get(
        f"/protocol/plans/{plan_ids[0]}/agents", params={"page": 1, "offset": 2}
    )
    assert by_offset.json()["total"] == 3 and len(by_offset.json()["agents"]) == 2
    by_size = await api.http.get(
        f"/protocol/plans/{plan_ids[0]}/agents", params={"page": 2, "pageSize": 2}
    )
    assert by_size.json()["offset"] == 2 and len(by_size.json()["agents"]) == 1
    plans = await api.http.get(f"/protocol/agents/{agent_ids[0]}/plans", params={"pageSize": 10})
    items = plans.json()["plans"]
    assert plans.json()["total"] == 3
    assert {p["planId"] for p in items} == set(plan_ids) == {p["id"] for p in items}
    assert {p["metadata"]["main"]["name"] for p in items} == {"P0", "P1", "P2"}
    assert (await api.http.get("/protocol/agents/did:svc:nope/plans")).status_code == 404
    assert (await api.http.get("/protocol/plans/777/agents")).status_code == 404
    mine = await api.http.get("/protocol/agents", params={"offset": 2}, headers=owner.headers)
    assert mine.json()["total"] == 3 and len(mine.json()["agents"]) == 2


async def test_delete_association_statuses(api: Api, owner: Actor, buyer: Actor) -> None:
    keep, drop = await api.plan(owner), await api.plan(owner)
    agent_id = await api.agent(owner, [keep, drop])
    path = f"/protocol/agents/{agent_id}/plan/{drop}"
    assert (await api.http.delete(path)).status_code == 401
    assert (await api.http.delete(path, headers=buyer.headers)).status_code == 403
    assert (
        await api.http.delete(
            f"/protocol/agents/did:svc:unknown/plan/{drop}", headers=owner.headers
        )
    ).status_code == 404
    assert (
        await api.http.delete(f"/protocol/agents/{agent_id}/plan/31337", headers=owner.headers)
    ).status_code == 404
    removed = await api.http.delete(path, headers=owner.headers)
    assert removed.status_code == 200 and removed.json() == {"success": True}
    agent = (await api.http.get(f"/protocol/agents/{agent_id}")).json()
    assert agent["registry"]["plans"] == [keep]
    again = await api.http.delete(path, headers=owner.headers)
    assert again.status_code == 404 and again.json()["code"] == "BCK.PROTOCOL.0004"
    not_integer = await api.http.delete(
        f"/protocol/agents/{agent_id}/plan/abc", headers=owner.headers
    )
    assert not_integer.status_code == 400


async def test_put_agent_replaces_metadata_and_endpoints_for_the_owner_only(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    plan_id = await api.plan(owner)
    agent_id = await api.agent(owner, [plan_id], endpoints=[{"POST": "https://old.example/a"}])
    body = {
        "metadataAttributes": {"name": "Renamed", "description": "new", "tags": ["x"]},
        "agentApiAttributes": {"endpoints": [{"GET": "mcp://srv/tools/*"}], "authType": "none"},
    }
    path = f"/protocol/agents/{agent_id}"
    assert (await api.http.put(path, json=body)).status_code == 401
    stranger = await api.http.put(path, json=body, headers=buyer.headers)
    assert stranger.status_code == 403 and stranger.json()["code"] == "BCK.PROTOCOL.0003"
    missing = await api.http.put("/protocol/agents/did:svc:none", json=body, headers=owner.headers)
    assert missing.status_code == 404 and missing.json()["code"] == "BCK.PROTOCOL.0002"
    bad = await api.http.put(path, json={"agentApiAttributes": {}}, headers=owner.headers)
    assert bad.status_code == 400 and "metadataAttributes" in bad.json()["message"]
    done = await api.http.put(path, json=body, headers=owner.headers)
    assert done.status_code == 200 and done.json()["success"] is True
    agent = (await api.http.get(path)).json()
    assert agent["metadata"]["main"]["name"] == "Renamed"
    assert agent["endpoints"] == [{"GET": "mcp://srv/tools/*"}]
    assert agent["registry"]["plans"] == [plan_id]
