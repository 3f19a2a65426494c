"""A standard MCP client pays a paid MCP server through the sandbox's OAuth 2.1 server.

The official ``mcp`` client's ``OAuthClientProvider`` discovers the protected resource, the
authorization server, registers (RFC 7591), sends the subscriber to the consent page with PKCE
S256, exchanges the code, and calls a paid tool with the token. The subscriber's browser is an
HTTP client submitting the consent form as a browser would.
"""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from mcp import ClientSession
from mcp.client.auth import OAuthClientProvider, TokenStorage
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken
from pydantic import AnyUrl

from svc_gateway.selling.ways_in.mcp import Options

from ..mcp.conftest import GRANTED, McpMarket, McpMarketFactory

CALLBACK = "http://127.0.0.1:9/callback"


class MemoryStorage(TokenStorage):
    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


class Browser:
    """The subscriber's browser: opens the consent page and submits its form."""

    def __init__(self, api_key: str, decision: str = "approve") -> None:
        self.api_key = api_key
        self.decision = decision
        self.pages: list[str] = []
        self.landed: dict[str, str] = {}

    async def open(self, url: str) -> None:
        async with httpx.AsyncClient(timeout=30) as http:
            page = await http.get(url)
            assert page.status_code == 200, page.text
            self.pages.append(page.text)
            request_id = re.search(r"name='request' value='([^']+)'", page.text)
            assert request_id is not None
            answer = await http.post(
                urlsplit(url)._replace(query="").geturl(),
                data={
                    "request": request_id.group(1),
                    "api_key": self.api_key,
                    "decision": self.decision,
                },
            )
        assert answer.status_code == 302
        location = answer.headers["location"]
        assert location.startswith(CALLBACK + "?")
        self.landed = {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}

    async def callback(self) -> tuple[str, str | None]:
        if "code" not in self.landed:
            raise RuntimeError(f"no code: {self.landed.get('error')}")
        return self.landed["code"], self.landed.get("state")


def provider(market: McpMarket, browser: Browser, storage: MemoryStorage) -> OAuthClientProvider:
    return OAuthClientProvider(
        server_url=market.url,
        client_metadata=OAuthClientMetadata(
            redirect_uris=[AnyUrl(CALLBACK)], client_name="Inspector-like client"
        ),
        storage=storage,
        redirect_handler=browser.open,
        callback_handler=browser.callback,
    )


def add_tool(market: McpMarket) -> None:
    async def forecast(arguments: dict[str, Any]) -> dict[str, Any]:
        return {"city": arguments.get("city"), "forecast": "sunny"}

    market.server.tool(
        "forecast",
        forecast,
        description="Tomorrow's weather",
        input_schema={"type": "object", "properties": {"city": {"type": "string"}}},
        options=Options(credits=2),
    )


async def ledger(market: McpMarket, address: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=market.sandbox.base_url) as http:
        answer = await http.get(f"/sandbox/ledger/{market.plan_id}/{address}")
    assert answer.status_code == 200
    return dict(answer.json())


async def test_official_client_completes_oauth_and_a_paid_call_settles_once(
    make_mcp_market: McpMarketFactory,
) -> None:
    market = await make_mcp_market()
    add_tool(market)
    subscriber = await market.sandbox.create_account("oauth subscriber")  # holds no credits
    market.secrets.append(subscriber["apiKey"])
    browser, storage = Browser(subscriber["apiKey"]), MemoryStorage()
    auth = provider(market, browser, storage)
    async with (
        httpx.AsyncClient(auth=auth, timeout=30) as http,
        streamable_http_client(market.url, http_client=http) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        result = await session.call_tool("forecast", {"city": "Oslo"})
    assert not result.isError, result
    assert result.structuredContent == {"city": "Oslo", "forecast": "sunny"}
    assert storage.client is not None and storage.tokens is not None
    market.secrets.append(storage.tokens.access_token)
    assert storage.tokens.token_type.lower() == "bearer"
    assert "Weather MCP" in browser.pages[0] and "MCP credits" in browser.pages[0]
    # the token bought the plan once through the approved delegation, then paid 2 credits once
    view = await ledger(market, subscriber["address"])
    assert int(view["burned"]) == 2
    assert int(view["granted"]) == GRANTED == int(view["balance"]) + int(view["burned"])


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode()).digest()
    return verifier, base64.urlsafe_b64encode(digest).decode().rstrip("=")


class Flow:
    """The same steps by hand, to check what a client must not get away with."""

    def __init__(self, market: McpMarket, http: httpx.AsyncClient) -> None:
        self.market, self.http = market, http
        self.origin = market.sandbox.origin
        self.verifier, self.challenge = pkce()

    async def register(self, uris: list[str] | None = None) -> str:
        answer = await self.http.post(
            self.origin + "/oauth/register", json={"redirect_uris": uris or [CALLBACK]}
        )
        assert answer.status_code == 201, answer.text
        return str(answer.json()["client_id"])

    def query(self, client_id: str, **extra: str) -> dict[str, str]:
        return {
            "response_type": "code",
            "client_id": client_id,
            "redirect_uri": CALLBACK,
            "state": "s-1",
            "code_challenge": self.challenge,
            "code_challenge_method": "S256",
            "resource": self.market.url,
            **extra,
        }

    async def authorize(self, client_id: str, api_key: str, decision: str = "approve") -> dict:
        page = await self.http.get(self.origin + "/oauth/authorize", params=self.query(client_id))
        assert page.status_code == 200, page.text
        found = re.search(r"name='request' value='([^']+)'", page.text)
        assert found is not None
        answer = await self.http.post(
            self.origin + "/oauth/authorize",
            data={"request": found.group(1), "api_key": api_key, "decision": decision},
        )
        assert answer.status_code == 302
        location = answer.headers["location"]
        assert location.startswith(CALLBACK + "?")
        return {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}

    async def token(self, client_id: str, code: str, verifier: str | None = None) -> httpx.Response:
        return await self.http.post(
            self.origin + "/oauth/token",
            data={
                "grant_type": "authorization_code",
                "code": code,
                "client_id": client_id,
                "redirect_uri": CALLBACK,
                "code_verifier": verifier or self.verifier,
                "resource": self.market.url,
            },
        )


@pytest.fixture
async def flow(make_mcp_market: McpMarketFactory) -> Any:
    market = await make_mcp_market()
    async with httpx.AsyncClient(timeout=30) as http:
        yield Flow(market, http)


async def subscriber_key(flow: Flow) -> str:
    created = await flow.market.sandbox.create_account("oauth subscriber")
    flow.market.secrets.append(created["apiKey"])
    return created["apiKey"]


async def test_a_wrong_code_verifier_gets_no_token(flow: Flow) -> None:
    client_id = await flow.register()
    landed = await flow.authorize(client_id, await subscriber_key(flow))
    assert landed["state"] == "s-1" and landed["iss"] == flow.origin
    wrong, _ = pkce()
    refused = await flow.token(client_id, landed["code"], wrong)
    assert refused.status_code == 400
    assert refused.json()["error"] == "invalid_grant"
    assert "access_token" not in refused.json()


async def test_a_code_works_once(flow: Flow) -> None:
    client_id = await flow.register()
    landed = await flow.authorize(client_id, await subscriber_key(flow))
    first = await flow.token(client_id, landed["code"])
    assert first.status_code == 200, first.text
    flow.market.secrets.append(first.json()["access_token"])
    assert first.json()["token_type"] == "Bearer" and first.json()["expires_in"] > 0
    again = await flow.token(client_id, landed["code"])
    assert again.status_code == 400 and again.json()["error"] == "invalid_grant"
    # a replayed code withdraws the approval: the token it gave no longer pays
    add_tool(flow.market)
    async with flow.market.session(first.json()["access_token"]) as session:
        result = await session.call_tool("forecast", {"city": "Oslo"}, {})
    assert result["isError"] is True and "x402Version" in result["structuredContent"]
    assert await flow.market.burned() == 0


async def test_a_code_is_only_for_the_client_it_was_issued_to(flow: Flow) -> None:
    client_id, other = await flow.register(), await flow.register()
    landed = await flow.authorize(client_id, await subscriber_key(flow))
    stolen = await flow.token(other, landed["code"])
    assert stolen.status_code == 400 and stolen.json()["error"] == "invalid_grant"


async def test_an_unregistered_redirect_uri_is_shown_an_error_never_redirected_to(
    flow: Flow,
) -> None:
    client_id = await flow.register()
    elsewhere = "https://attacker.example/cb"
    page = await flow.http.get(
        flow.origin + "/oauth/authorize", params=flow.query(client_id, redirect_uri=elsewhere)
    )
    assert page.status_code == 400 and "location" not in page.headers
    assert "redirect_uri" in page.text
    unknown = await flow.http.get(
        flow.origin + "/oauth/authorize", params=flow.query("svc-oauth-client-nobody")
    )
    assert unknown.status_code == 400 and "location" not in unknown.headers
    bad = await flow.http.post(
        flow.origin + "/oauth/register", json={"redirect_uris": ["http://attacker.example/cb"]}
    )
    assert bad.status_code == 400 and bad.json()["error"] == "invalid_redirect_uri"


async def test_a_request_without_pkce_is_refused(flow: Flow) -> None:
    client_id = await flow.register()
    query = flow.query(client_id)
    del query["code_challenge"], query["code_challenge_method"]
    answer = await flow.http.get(flow.origin + "/oauth/authorize", params=query)
    assert answer.status_code == 302
    landed = parse_qs(urlsplit(answer.headers["location"]).query)
    assert landed["error"] == ["invalid_request"] and "code" not in landed
    plain = flow.query(client_id, code_challenge_method="plain")
    answer = await flow.http.get(flow.origin + "/oauth/authorize", params=plain)
    assert parse_qs(urlsplit(answer.headers["location"]).query)["error"] == ["invalid_request"]


async def test_deny_gives_access_denied_and_no_code(flow: Flow) -> None:
    client_id = await flow.register()
    landed = await flow.authorize(client_id, await subscriber_key(flow), decision="deny")
    assert landed["error"] == "access_denied" and landed["state"] == "s-1"
    assert "code" not in landed


async def test_the_resource_names_the_sandbox_as_its_authorization_server(flow: Flow) -> None:
    base = flow.market.url.removesuffix("/mcp")
    resource = (await flow.http.get(base + "/.well-known/oauth-protected-resource/mcp")).json()
    assert resource["authorization_servers"] == [flow.origin]
    assert resource["agent_id"] == flow.market.agent_id
    metadata = (await flow.http.get(flow.origin + "/.well-known/oauth-authorization-server")).json()
    assert metadata["issuer"] == flow.origin
    assert metadata["code_challenge_methods_supported"] == ["S256"]
    for key in ("authorization_endpoint", "token_endpoint", "registration_endpoint", "jwks_uri"):
        assert metadata[key].startswith(flow.origin + "/")
    assert (await flow.http.get(metadata["jwks_uri"])).json() == {"keys": []}


async def test_the_token_request_must_repeat_the_redirect_uri(flow: Flow) -> None:
    client_id = await flow.register([CALLBACK, "http://127.0.0.1:9/other"])
    landed = await flow.authorize(client_id, await subscriber_key(flow))
    answer = await flow.http.post(
        flow.origin + "/oauth/token",
        data={
            "grant_type": "authorization_code",
            "code": landed["code"],
            "client_id": client_id,
            "redirect_uri": "http://127.0.0.1:9/other",
            "code_verifier": flow.verifier,
        },
    )
    assert answer.status_code == 400 and answer.json()["error"] == "invalid_grant"


async def test_browser_clients_may_read_discovery_and_call_the_token_endpoint(
    flow: Flow,
) -> None:
    base = flow.market.url.removesuffix("/mcp")
    for url in (
        base + "/.well-known/oauth-protected-resource/mcp",
        flow.origin + "/.well-known/oauth-authorization-server",
        flow.origin + "/oauth/register",
        flow.origin + "/oauth/token",
    ):
        preflight = await flow.http.options(
            url,
            headers={"Origin": "http://localhost:6274", "Access-Control-Request-Method": "POST"},
        )
        assert preflight.status_code == 204, url
        assert preflight.headers["access-control-allow-origin"] == "*"
    document = await flow.http.get(base + "/.well-known/oauth-protected-resource")
    assert document.headers["access-control-allow-origin"] == "*"


async def test_a_confidential_client_must_prove_its_secret(flow: Flow) -> None:
    registered = await flow.http.post(
        flow.origin + "/oauth/register",
        json={"redirect_uris": [CALLBACK], "token_endpoint_auth_method": "client_secret_basic"},
    )
    assert registered.status_code == 201
    client_id, secret = registered.json()["client_id"], registered.json()["client_secret"]
    landed = await flow.authorize(client_id, await subscriber_key(flow))
    form = {
        "grant_type": "authorization_code",
        "code": landed["code"],
        "redirect_uri": CALLBACK,
        "code_verifier": flow.verifier,
    }
    wrong = await flow.http.post(
        flow.origin + "/oauth/token", data=form, auth=(client_id, "not-the-secret")
    )
    assert wrong.status_code == 401 and wrong.json()["error"] == "invalid_client"
    right = await flow.http.post(flow.origin + "/oauth/token", data=form, auth=(client_id, secret))
    assert right.status_code == 200, right.text
    flow.market.secrets.append(right.json()["access_token"])


async def test_malformed_requests_get_rfc_6749_errors(flow: Flow) -> None:
    client_id = await flow.register()
    no_resource = flow.query(client_id)
    del no_resource["resource"]
    answer = await flow.http.get(flow.origin + "/oauth/authorize", params=no_resource)
    landed = parse_qs(urlsplit(answer.headers["location"]).query)
    assert landed["error"] == ["invalid_target"] and landed["state"] == ["s-1"]
    implicit = flow.query(client_id, response_type="token")
    answer = await flow.http.get(flow.origin + "/oauth/authorize", params=implicit)
    assert parse_qs(urlsplit(answer.headers["location"]).query)["error"] == [
        "unsupported_response_type"
    ]
    grant = await flow.http.post(
        flow.origin + "/oauth/token", data={"grant_type": "password", "client_id": client_id}
    )
    assert grant.status_code == 400 and grant.json()["error"] == "unsupported_grant_type"
    as_json = await flow.http.post(flow.origin + "/oauth/token", json={"grant_type": "x"})
    assert as_json.status_code == 400 and as_json.json()["error"] == "invalid_request"
    unknown = await flow.token("svc-oauth-client-nobody", "some-code")
    assert unknown.status_code == 401 and unknown.json()["error"] == "invalid_client"
    bad_key = await flow.http.get(flow.origin + "/oauth/authorize", params=flow.query(client_id))
    found = re.search(r"name='request' value='([^']+)'", bad_key.text)
    assert found is not None
    refused = await flow.http.post(
        flow.origin + "/oauth/authorize",
        data={"request": found.group(1), "api_key": "local:forged", "decision": "approve"},
    )
    assert refused.status_code == 401 and "not a valid sandbox API key" in refused.text


async def test_a_client_registering_at_the_mcp_origin_logs_in_with_the_service_and_pays(
    flow: Flow,
) -> None:
    """Issue 43.6: one authorization server. A client of the 2025-03-26 revision (mcp-remote
    0.1.0) reads the authorization metadata at the MCP server's origin and registers there: the
    documents are the service's own (no ``refresh_token`` advertised: none is issued), the
    registration is the service's, so its client id logs in at the service's authorize page;
    the official client then pays with the token it got."""
    market, http = flow.market, flow.http
    base = market.url.removesuffix("/mcp")
    for path in ("/.well-known/oauth-authorization-server", "/.well-known/openid-configuration"):
        served = (await http.get(base + path)).json()
        assert served == (await http.get(flow.origin + path)).json()  # the service's own
        assert "refresh_token" not in served["grant_types_supported"]
    metadata = (await http.get(base + "/.well-known/oauth-authorization-server")).json()
    registered = await http.post(
        base + "/register", json={"redirect_uris": [CALLBACK], "client_name": "mcp-remote"}
    )
    assert registered.status_code == 201, registered.text
    client_id = registered.json()["client_id"]
    assert client_id != market.agent_id  # the service's client id, not the agent's DID
    assert metadata["authorization_endpoint"] == flow.origin + "/oauth/authorize"
    subscriber = await market.sandbox.create_account("oauth subscriber")  # holds no credits
    market.secrets.append(subscriber["apiKey"])
    landed = await flow.authorize(client_id, subscriber["apiKey"])
    issued = await http.post(
        metadata["token_endpoint"],
        data={
            "grant_type": "authorization_code",
            "code": landed["code"],
            "client_id": client_id,
            "redirect_uri": CALLBACK,
            "code_verifier": flow.verifier,
            "resource": market.url,
        },
    )
    assert issued.status_code == 200, issued.text
    assert "refresh_token" not in issued.json()
    token = issued.json()["access_token"]
    market.secrets.append(token)
    add_tool(market)
    async with market.session(token) as session:  # the official client, the bearer pays
        result = await session.call_tool("forecast", {"city": "Oslo"}, None)
    assert result["structuredContent"] == {"city": "Oslo", "forecast": "sunny"}
    view = await ledger(market, subscriber["address"])  # bought once, then 2 credits burned
    assert int(view["burned"]) == 2
    assert int(view["granted"]) == GRANTED == int(view["balance"]) + int(view["burned"])


async def test_a_registration_the_service_refuses_is_refused_as_the_service_said(
    flow: Flow,
) -> None:
    base = flow.market.url.removesuffix("/mcp")
    refused = await flow.http.post(
        base + "/register", json={"redirect_uris": ["http://attacker.example/cb"]}
    )
    assert refused.status_code == 400 and refused.json()["error"] == "invalid_redirect_uri"
    oversized = await flow.http.post(base + "/register", content=b"x" * (17 * 1024))
    assert oversized.status_code == 413
