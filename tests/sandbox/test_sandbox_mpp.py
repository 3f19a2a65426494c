"""The MPP routes of a deployment without MPP: 501 ``BCK.MPP.0002`` on each, key or none."""

from __future__ import annotations

from .support import Actor, Api


async def test_each_mpp_route_answers_not_configured(api: Api, owner: Actor) -> None:
    for name in ("permissions", "challenge", "verify", "settle"):
        for headers in ({}, owner.headers):
            answer = await api.http.post(f"/mpp/{name}", json={}, headers=headers)
            assert answer.status_code == 501, (name, answer.text)
            body = answer.json()
            assert (body["code"], body["message"]) == (
                "BCK.MPP.0002",
                "MPP is not configured on this environment",
            )
            assert "/x402/" in body["hint"]
