"""Which envelope ``resource.url`` a version 3 token accepts: its own URL, give or take a
trailing slash, or the same path when the seller sends a relative URL; never another host."""

from __future__ import annotations

from .support import Actor, Api, envelope
from .test_sandbox_tokens_v3 import mint_v3

ORIGIN = "http://127.0.0.1:8402"

#: (URL the token was minted for, URL the seller's envelope names, accepted?)
CASES = (
    (f"{ORIGIN}/svc/taskX/", f"{ORIGIN}/svc/taskX", True),
    (f"{ORIGIN}/svc/taskX/", "/svc/taskX", True),
    (f"{ORIGIN}/svc/taskX/", "//other.example/svc/taskX/", False),
    (f"{ORIGIN}/svc/taskX/", "http://other.example/svc/taskX/", False),
    (f"{ORIGIN}/svc/taskX/", "/svc/task", False),
    (f"{ORIGIN}/svc/taskX", f"{ORIGIN}/svc/taskX/", True),
    (f"{ORIGIN}/svc/taskX", "/svc/taskX/", True),
    (f"{ORIGIN}/svc/taskX", "/other/taskX", False),
    (ORIGIN, "/", True),
    (ORIGIN, "?page=1", True),
    (ORIGIN, "/svc", False),
)


async def test_v3_token_accepts_its_own_resource_only(api: Api, owner: Actor, buyer: Actor) -> None:
    plan_id = await api.plan(owner, credits=10)
    assert (await api.order(buyer, plan_id)).status_code == 200
    agent_id = await api.agent(owner, [plan_id])  # no endpoints: only the binding decides
    tokens: dict[str, str] = {}
    for bound, url, accepted in CASES:
        if bound not in tokens:
            minted = await mint_v3(api, buyer, plan_id, agent_id, url=bound)
            assert minted.status_code == 200, minted.text
            tokens[bound] = minted.json()["accessToken"]
        paid = envelope(plan_id, agent_id=agent_id, url=url, verb="POST")
        verified = await api.verify(owner, tokens[bound], plan_id, paid=paid)
        assert verified["isValid"] is accepted, (bound, url, verified)
        if not accepted:
            assert "bound to another resource URL" in verified["invalidReason"], (bound, url)
    assert await api.credits(plan_id, buyer) == 10  # verify is a dry run


async def test_v3_refusals_name_the_binding_and_a_matched_request_names_its_endpoint(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    plan_id = await api.plan(owner, credits=10)
    assert (await api.order(buyer, plan_id)).status_code == 200
    url = f"{ORIGIN}/svc/agent"
    agent_id = await api.agent(owner, [plan_id], endpoints=[{"POST": url}, {"GET": url}])
    minted = await mint_v3(api, buyer, plan_id, agent_id, url=url)
    token = minted.json()["accessToken"]
    other_verb = envelope(plan_id, agent_id=agent_id, url=url, verb="GET")
    refused = await api.verify(owner, token, plan_id, paid=other_verb)
    assert refused["isValid"] is False
    assert "bound to another HTTP verb" in refused["invalidReason"]
    not_text = envelope(plan_id, agent_id=agent_id, url=url, verb="POST")
    not_text["resource"] = {"url": 5}
    odd = await api.verify(owner, token, plan_id, paid=not_text)
    assert odd["isValid"] is False
    assert "bound to another resource URL" in odd["invalidReason"]
    ok = await api.verify(
        owner, token, plan_id, paid=envelope(plan_id, agent_id=agent_id, url=url, verb="POST")
    )
    assert ok["isValid"] is True
    assert ok["agentRequest"]["urlMatching"] == ok["urlMatching"] == url
    assert ok["agentRequest"]["verbMatching"] == "POST"
    assert ok["agentRequest"]["batch"] is False
    assert await api.credits(plan_id, buyer) == 10
