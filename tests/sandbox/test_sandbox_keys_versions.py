"""API keys (401) and versioning (SPEC.md "Versioning") over real HTTP."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import pytest

from svc_gateway.api_keys import parse_api_key
from svc_gateway.encoding import jwt_claims
from svc_gateway.sandbox import start_sandbox
from svc_gateway.sandbox.context import STORE
from svc_gateway.sandbox.tokens import sign

from .support import Actor, Api


def assert_version_headers(answer: httpx.Response, version: str, source: str) -> None:
    assert answer.headers["Service-Version"] == version
    assert answer.headers["Service-Version-Resolved-From"] == source


async def test_issued_key_is_a_local_jwt_the_plugin_can_parse(owner: Actor) -> None:
    parsed = parse_api_key(owner.key)
    assert parsed.environment == "local"
    assert parsed.address == owner.address
    claims = jwt_claims(owner.key.split(":", 1)[1])
    assert claims is not None
    assert claims["iss"] == claims["sub"] == owner.address
    assert claims["o11y"] == "sandbox" and claims["jti"] and isinstance(claims["iat"], int)


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "Bearer",
        "Bearer local:not-a-jwt",
        "Basic dXNlcjpwYXNz",
    ],
)
async def test_missing_or_garbage_key_is_401(
    http: httpx.AsyncClient, authorization: str | None
) -> None:
    headers = {"Authorization": authorization} if authorization else {}
    answer = await http.get("/protocol/plans", headers=headers)
    assert answer.status_code == 401
    assert answer.json()["code"] == "BCK.APIKEY.0004"
    assert_version_headers(answer, "1.0", "fallback")


async def test_forged_and_foreign_keys_are_401(api: Api, owner: Actor) -> None:
    head, payload, signature = owner.key.split(":", 1)[1].split(".")
    tampered_sig = "local:" + ".".join([head, payload, signature[:-2] + "AA"])
    other_env = "live:" + owner.key.split(":", 1)[1]
    store = api.server.app[STORE]
    claims = {"iss": owner.address, "sub": owner.address, "jti": str(uuid.uuid4()), "iat": 1}
    unknown_jti = "local:" + sign(claims, store.key_signing)  # right signature, jti not on file
    for key in (tampered_sig, other_env, unknown_jti):
        answer = await api.http.get("/protocol/plans", headers={"Authorization": f"Bearer {key}"})
        assert answer.status_code == 401, key[:12]
    assert (await api.http.get("/protocol/plans", headers=owner.headers)).status_code == 200


async def test_file_database_keeps_keys_valid_across_restarts(tmp_path: Path) -> None:
    db = str(tmp_path / "sandbox.sqlite")
    first = await start_sandbox(db=db)
    account = await first.create_account("persistent")
    await first.close()
    second = await start_sandbox(db=db)
    try:
        async with httpx.AsyncClient(base_url=second.base_url) as http:
            answer = await http.get(
                "/meta/versions", headers={"Authorization": f"Bearer {account['apiKey']}"}
            )
        assert answer.status_code == 200
    finally:
        await second.close()


@pytest.mark.parametrize(
    ("sent", "applied"), [("1.0", "1.0"), ("v1.0", "1.0"), ("1.0.7", "1.0"), ("1.1", "1.1")]
)
async def test_header_forms_normalise_and_win_over_the_key_pin(
    http: httpx.AsyncClient, owner: Actor, sent: str, applied: str
) -> None:
    answer = await http.get("/protocol/plans", headers={**owner.headers, "Service-Version": sent})
    assert answer.status_code == 200
    assert_version_headers(answer, applied, "header")


async def test_key_pin_applies_without_header(api: Api, owner: Actor) -> None:
    old = await api.account("legacy", version="1.0")
    answer = await api.http.get("/protocol/plans", headers=old.headers)
    assert_version_headers(answer, "1.0", "apiKey")
    answer = await api.http.get("/protocol/plans", headers=owner.headers)
    assert_version_headers(answer, "1.1", "apiKey")
    meta = (await api.http.get("/meta/versions", headers=old.headers)).json()
    assert meta == {
        "current": "1.1",
        "floor": "1.0",
        "gatedVersions": ["1.1"],
        "yourPinnedVersion": "1.0",
        "yourEffectiveVersion": "1.0",
        "yourVersionResolvedFrom": "apiKey",
    }
    header_meta = await api.http.get(
        "/meta/versions", headers={**old.headers, "Service-Version": "v1.1"}
    )
    assert header_meta.json()["yourEffectiveVersion"] == "1.1"
    assert header_meta.json()["yourVersionResolvedFrom"] == "header"


async def test_public_route_without_key_falls_back_to_floor(
    http: httpx.AsyncClient, owner: Actor
) -> None:
    answer = await http.get("/protocol/plans/123")
    assert answer.status_code == 404
    assert_version_headers(answer, "1.0", "fallback")
    answer = await http.get("/protocol/plans/123", headers=owner.headers)
    assert_version_headers(answer, "1.1", "apiKey")


@pytest.mark.parametrize("bad", ["2.0", "0.9", "1.2", "latest", "1", "", "1.0-beta"])
async def test_unknown_or_garbage_version_is_400(
    http: httpx.AsyncClient, owner: Actor, bad: str
) -> None:
    answer = await http.get("/protocol/plans", headers={**owner.headers, "Service-Version": bad})
    assert answer.status_code == 400
    body = answer.json()
    assert body["code"] == "BCK.VERSION.0001"
    assert repr(bad) in body["message"] and "1.0" in body["message"] and "1.1" in body["message"]
    assert_version_headers(answer, "1.1", "apiKey")
    public = await http.get("/protocol/plans/1", headers={"Service-Version": bad})
    assert public.status_code == 400
    assert_version_headers(public, "1.0", "fallback")


async def test_meta_versions_needs_a_key_and_ignores_a_bad_header(
    http: httpx.AsyncClient, owner: Actor
) -> None:
    anonymous = await http.get("/meta/versions")
    assert anonymous.status_code == 401
    assert_version_headers(anonymous, "1.0", "fallback")
    answer = await http.get("/meta/versions", headers={**owner.headers, "Service-Version": "9.9"})
    assert answer.status_code == 200
    assert answer.json()["yourEffectiveVersion"] == "1.1"
    assert_version_headers(answer, "1.1", "apiKey")


async def test_every_response_carries_version_headers(http: httpx.AsyncClient) -> None:
    for answer in (
        await http.get("/no/such/route", headers={"Service-Version": "1.1"}),
        await http.delete("/sandbox/accounts"),
        await http.get(http.base_url.join("/login")),
    ):
        assert answer.headers["Service-Version"] in ("1.0", "1.1")
        assert answer.headers["Service-Version-Resolved-From"] in ("header", "fallback")
    unknown = await http.get("/no/such/route", headers={"Service-Version": "1.1"})
    assert unknown.status_code == 404 and unknown.json()["code"] == "BCK.COMMON.0004"
    assert_version_headers(unknown, "1.1", "header")


async def test_account_pin_must_be_a_known_version(http: httpx.AsyncClient) -> None:
    answer = await http.post("/sandbox/accounts", json={"apiVersion": "3.0"})
    assert answer.status_code == 400 and answer.json()["code"] == "BCK.VERSION.0001"
    answer = await http.post("/sandbox/accounts", json={"apiVersion": "v1.0.3"})
    assert answer.status_code == 201
    old = Actor(answer.json()["apiKey"], answer.json()["address"])
    listed = await http.get("/protocol/plans", headers=old.headers)
    assert_version_headers(listed, "1.0", "apiKey")
