"""Organizations over raw HTTP: the refusals say what to send, and the feed filters."""

from __future__ import annotations

from .support import Actor, Api, plan_body

ORG = "X-Current-Org-Id"


async def org_of(api: Api, actor: Actor) -> str:
    answer = await api.http.get("/organizations/my-memberships", headers=actor.headers)
    assert answer.status_code == 200, answer.text
    return str(answer.json()[0]["orgId"])


async def test_bad_enrolment_bodies_are_refused_with_the_field_named(
    api: Api, owner: Actor
) -> None:
    cases = [
        ({"as": "partner", "email": "a@b.c"}, 'as must be "customer"'),
        ({"as": "customer", "email": "not-an-email"}, "email must be an email address"),
        ({"as": "customer"}, "email is required"),
        ({"uniqueExternalId": "u1", "role": "Owner"}, "role must be Admin or Member"),
        ({}, "uniqueExternalId is required"),
    ]
    for body, message in cases:
        answer = await api.http.post("/organizations/account", json=body, headers=owner.headers)
        assert answer.status_code == 400 and message in answer.json()["message"], body
    listed = await api.http.post(
        "/organizations/members", json={"isActive": "yes"}, headers=owner.headers
    )
    assert listed.status_code == 400 and "isActive" in listed.json()["message"]
    wrong_role = await api.http.post(
        "/organizations/members", json={"role": "Owner"}, headers=owner.headers
    )
    assert wrong_role.status_code == 400


async def test_a_workspace_the_caller_does_not_belong_to_is_403_with_a_hint(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    headers = {**owner.headers, ORG: await org_of(api, buyer)}
    members = await api.http.post("/organizations/members", json={}, headers=headers)
    publish = await api.http.post("/protocol/plans", json=plan_body(owner), headers=headers)
    for answer in (members, publish):
        assert answer.status_code == 403, answer.text
        assert answer.json()["code"] == "BCK.AUTH.0004"
        assert "my-memberships" in answer.json()["hint"]
    assert (await api.http.get("/organizations/my-memberships")).status_code == 401


async def test_enrolled_members_are_active_and_the_feed_filters_by_actor_and_pages(
    api: Api, owner: Actor
) -> None:
    org_id = await org_of(api, owner)
    for n in range(3):
        body = {"uniqueExternalId": f"emp-{n}", "role": "Admin" if n == 0 else "Member"}
        created = await api.http.post("/organizations/account", json=body, headers=owner.headers)
        assert created.status_code == 201 and created.json()["walletResult"]["hash"]
    inactive = await api.http.post(
        "/organizations/members", json={"isActive": False}, headers=owner.headers
    )
    assert inactive.json()["totalResults"] == 0
    admins = await api.http.post(
        "/organizations/members", json={"role": "Admin", "offset": 1}, headers=owner.headers
    )
    assert admins.json()["totalResults"] == 2 and len(admins.json()["members"]) == 1
    feed = f"/organizations/{org_id}/activity"
    mine = await api.http.get(feed, params={"limit": "2", "page": "2"}, headers=owner.headers)
    assert mine.json()["total"] == 3 and len(mine.json()["items"]) == 1
    actor = mine.json()["items"][0]["actorUserId"]
    by_actor = await api.http.get(feed, params={"actorUserId": actor}, headers=owner.headers)
    assert by_actor.json()["total"] == 3
    nobody = await api.http.get(feed, params={"actorUserId": "us-none"}, headers=owner.headers)
    assert nobody.json() == {"items": [], "total": 0}
    too_many = await api.http.get(feed, params={"limit": "201"}, headers=owner.headers)
    assert too_many.status_code == 400 and "limit" in too_many.json()["message"]
