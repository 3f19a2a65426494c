"""The sandbox's OAuth server (issue 41): a token only for a resource registered to the agent
its metadata names (RFC 8707 ``invalid_target``), the resource shown escaped on the consent
page, exact redirect URIs, and malformed input answered 400 in RFC 6749 / 7591's error shape.

The MCP servers here are small loopback stand-ins that publish RFC 9728 protected-resource
metadata; one of them is hostile (it names another builder's agent and plan)."""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from aiohttp import web

from .support import Actor, Api

CALLBACK = "http://127.0.0.1:9/callback"


@dataclass
class ResourceServer:
    """Publishes ``document`` as its protected-resource metadata, at every well-known path."""

    origin: str
    document: dict[str, Any] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.origin + "/mcp"


ResourceFactory = Callable[[], Awaitable[ResourceServer]]


@pytest.fixture
async def resource_server() -> AsyncIterator[ResourceFactory]:
    runners: list[web.AppRunner] = []

    async def factory() -> ResourceServer:
        document: dict[str, Any] = {}

        async def metadata(request: web.Request) -> web.Response:
            return web.json_response(document)

        app = web.Application()
        app.router.add_get("/.well-known/oauth-protected-resource{tail:.*}", metadata)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        runners.append(runner)
        return ResourceServer(f"http://127.0.0.1:{runner.addresses[0][1]}", document)

    yield factory
    for runner in runners:
        await runner.cleanup()


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode()).digest()
    return verifier, base64.urlsafe_b64encode(digest).decode().rstrip("=")


@dataclass
class Oauth:
    """One builder's agent and plan, and an OAuth client, on the sandbox."""

    api: Api
    owner: Actor
    plan_id: str
    agent_id: str
    client_id: str
    verifier: str
    challenge: str

    @property
    def origin(self) -> str:
        return self.api.server.origin

    async def set_endpoints(self, urls: list[str]) -> None:
        answer = await self.api.http.put(
            f"/protocol/agents/{self.agent_id}",
            json={
                "metadataAttributes": {"name": "Agent"},
                "agentApiAttributes": {"endpoints": [{"POST": url} for url in urls]},
            },
            headers=self.owner.headers,
        )
        assert answer.status_code == 200, answer.text

    def publish(self, server: ResourceServer, resource: str | None = None) -> str:
        """``server`` names this agent and plan for ``resource`` (its URL by default)."""
        resource = resource or server.url
        server.document.update(
            resource=resource,
            authorization_servers=[self.origin],
            agent_id=self.agent_id,
            plan_id=self.plan_id,
        )
        return resource

    async def authorize(self, resource: str, **extra: str) -> httpx.Response:
        query = {
            "response_type": "code",
            "client_id": self.client_id,
            "redirect_uri": CALLBACK,
            "state": "s-1",
            "code_challenge": self.challenge,
            "code_challenge_method": "S256",
            "resource": resource,
            **extra,
        }
        return await self.api.http.get(self.origin + "/oauth/authorize", params=query)

    async def code(self, resource: str, subscriber: Actor) -> str:
        page = await self.authorize(resource)
        assert page.status_code == 200, page.text
        found = re.search(r"name='request' value='([^']+)'", page.text)
        assert found is not None
        answer = await self.api.http.post(
            self.origin + "/oauth/authorize",
            data={"request": found.group(1), "api_key": subscriber.key, "decision": "approve"},
        )
        assert answer.status_code == 302
        return landed(answer)["code"]

    async def token(self, code: str, resource: str) -> httpx.Response:
        return await self.api.http.post(
            self.origin + "/oauth/token",
            data={
                "grant_type": "authorization_code",
                "code": code,
                "client_id": self.client_id,
                "redirect_uri": CALLBACK,
                "code_verifier": self.verifier,
                "resource": resource,
            },
        )


def landed(answer: httpx.Response) -> dict[str, str]:
    assert answer.status_code == 302, answer.text
    location = answer.headers["location"]
    assert location.startswith(CALLBACK + "?")
    return {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}


async def register(api: Api, uris: list[str]) -> str:
    answer = await api.http.post(
        api.server.origin + "/oauth/register", json={"redirect_uris": uris}
    )
    assert answer.status_code == 201, answer.text
    return str(answer.json()["client_id"])


@pytest.fixture
async def oauth(api: Api, owner: Actor) -> Oauth:
    plan_id = await api.plan(owner)
    agent_id = await api.agent(owner, [plan_id], endpoints=[{"POST": "mcp://srv/tools/*"}])
    verifier, challenge = pkce()
    client_id = await register(api, [CALLBACK])
    return Oauth(api, owner, plan_id, agent_id, client_id, verifier, challenge)


async def test_a_resource_not_registered_to_the_agent_it_names_gets_no_consent_page(
    oauth: Oauth, resource_server: ResourceFactory
) -> None:
    """A hostile server (unregistered origin) naming another agent and its plan is refused
    with invalid_target before any consent page; the agent's own server is not."""
    own, hostile = await resource_server(), await resource_server()
    await oauth.set_endpoints(["mcp://srv/tools/*", own.url])
    oauth.publish(own)
    oauth.publish(hostile)
    refused = await oauth.authorize(hostile.url)
    assert landed(refused)["error"] == "invalid_target"
    assert landed(refused)["state"] == "s-1" and "code" not in landed(refused)
    # another path on the agent's own origin is not registered either
    other_path = oauth.publish(own, own.origin + "/other")
    assert landed(await oauth.authorize(other_path))["error"] == "invalid_target"
    accepted = await oauth.authorize(oauth.publish(own))
    assert accepted.status_code == 200, accepted.text


async def test_an_agent_registered_with_logical_uris_only_gets_no_token_for_an_http_resource(
    oauth: Oauth, resource_server: ResourceFactory
) -> None:
    server = await resource_server()
    answer = await oauth.authorize(oauth.publish(server))
    assert landed(answer)["error"] == "invalid_target"


async def test_the_token_endpoint_refuses_a_resource_the_agent_no_longer_registers(
    oauth: Oauth, resource_server: ResourceFactory, buyer: Actor
) -> None:
    server = await resource_server()
    await oauth.set_endpoints([server.url])
    resource = oauth.publish(server)
    code = await oauth.code(resource, buyer)
    await oauth.set_endpoints(["mcp://srv/tools/*"])  # the builder withdrew the endpoint
    refused = await oauth.token(code, resource)
    assert refused.status_code == 400, refused.text
    assert set(refused.json()) == {"error", "error_description"}
    assert refused.json()["error"] == "invalid_target"


async def test_the_consent_page_shows_the_resource_url_escaped(
    oauth: Oauth, resource_server: ResourceFactory
) -> None:
    server = await resource_server()
    await oauth.set_endpoints([server.url])  # the query is not part of the match
    resource = oauth.publish(server, server.url + "?x=<b>bold</b>&y='q'")
    page = await oauth.authorize(resource)
    assert page.status_code == 200, page.text
    assert server.url + "?x=&lt;b&gt;bold&lt;/b&gt;&amp;y=&#x27;q&#x27;" in page.text
    assert "<b>bold</b>" not in page.text


@pytest.mark.parametrize(
    "given", ["https://client.example.evil.example/cb", "https://client.example/cb/extra"]
)
async def test_a_redirect_uri_that_only_starts_with_a_registered_one_is_refused(
    oauth: Oauth, given: str
) -> None:
    client_id = await register(oauth.api, ["https://client.example/cb"])
    answer = await oauth.api.http.get(
        oauth.origin + "/oauth/authorize",
        params={
            "response_type": "code",
            "client_id": client_id,
            "redirect_uri": given,
            "code_challenge": oauth.challenge,
            "code_challenge_method": "S256",
            "resource": "https://server.example/mcp",
        },
    )
    assert answer.status_code == 400 and "location" not in answer.headers
    assert "redirect_uri" in answer.text


@pytest.mark.parametrize(
    "body",
    [
        {"redirect_uris": [CALLBACK], "grant_types": [{}]},
        {"redirect_uris": [CALLBACK], "grant_types": [["authorization_code"]]},
        {"redirect_uris": [CALLBACK], "grant_types": [1]},
        {"redirect_uris": [CALLBACK], "response_types": [{}]},
        {"redirect_uris": [CALLBACK], "token_endpoint_auth_method": {}},
        {"redirect_uris": [CALLBACK], "token_endpoint_auth_method": ["none"]},
        {"redirect_uris": [{}]},
        {"redirect_uris": [CALLBACK], "client_name": {}},
    ],
)
async def test_malformed_client_metadata_is_a_400_in_rfc_7591_shape(
    api: Api, body: dict[str, Any]
) -> None:
    answer = await api.http.post(api.server.origin + "/oauth/register", json=body)
    if answer.status_code == 201:  # tolerated and replaced by the server's own value
        assert answer.json()["client_name"] == "MCP client", answer.text
        return
    assert answer.status_code == 400, answer.text
    assert set(answer.json()) == {"error", "error_description"}
    assert answer.json()["error"] in ("invalid_client_metadata", "invalid_redirect_uri")


@pytest.mark.parametrize("raw", [b"[]", b'"x"', b"1", b"null", b"\xff\xfe", b"{"])
async def test_a_registration_body_that_is_no_json_object_is_a_400(api: Api, raw: bytes) -> None:
    answer = await api.http.post(
        api.server.origin + "/oauth/register",
        content=raw,
        headers={"Content-Type": "application/json"},
    )
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"] == "invalid_client_metadata"


@pytest.mark.parametrize(
    "resource",
    ["http://[::1/mcp", "http://127.0.0.1:99999/mcp", "http://127.0.0.1:port/mcp", "http:///mcp"],
)
async def test_a_malformed_resource_url_is_invalid_target(oauth: Oauth, resource: str) -> None:
    answer = await oauth.authorize(resource)
    assert landed(answer)["error"] == "invalid_target"


@pytest.mark.parametrize("path", ["/oauth/token", "/oauth/authorize"])
async def test_a_form_body_that_is_not_utf_8_is_a_400_in_rfc_6749_shape(
    api: Api, path: str
) -> None:
    answer = await api.http.post(
        api.server.origin + path,
        content=b"grant_type=authorization_code&code=\xff\xfe&request=\xc3",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert answer.status_code == 400, answer.text
    assert answer.json() == {
        "error": "invalid_request",
        "error_description": "the form body is not UTF-8 form data",
    }
