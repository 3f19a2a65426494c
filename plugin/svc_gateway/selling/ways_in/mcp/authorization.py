"""The paid MCP server's one authorization server: the service, named and agreed with.

The protected-resource metadata (RFC 9728) names the service's API origin as the authorization
server. What the MCP server serves itself, for clients of older MCP revisions that look at the
MCP origin (the 2025-03-26 default), agrees with it: ``/.well-known/oauth-authorization-server``
and ``/.well-known/openid-configuration`` are the service's own documents, read from the service
and kept for :data:`TTL_SECS`, so they advertise only what the service issues (no
``refresh_token`` where it issues none); ``/register`` registers the client with the service
(the ``registration_endpoint`` its document names) and answers what the service answered, so
the client id it hands out is one the service's authorize endpoint knows.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from ....redact import get_logger

log = get_logger("svc_gateway.paid_mcp")

AS_METADATA = "/.well-known/oauth-authorization-server"
OPENID = "/.well-known/openid-configuration"
#: how long a document read from the service is served before it is read again
TTL_SECS = 300.0
FETCH_SECS = 5.0
MAX_DOCUMENT_BYTES = 64 * 1024
UNAVAILABLE = {
    "error": "temporarily_unavailable",
    "error_description": "The authorization server (the Agent Payments Service) cannot be "
    "reached now; retry shortly.",
}


class Unavailable(Exception):
    """The service's authorization server could not be read or asked."""


@dataclass(frozen=True)
class Answer:
    """What the service answered a registration: its status and JSON body."""

    status: int
    body: Any


async def _read(response: aiohttp.ClientResponse) -> Any:
    raw = await response.content.read(MAX_DOCUMENT_BYTES + 1)
    if len(raw) > MAX_DOCUMENT_BYTES:
        raise Unavailable("the answer is too large")
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise Unavailable("the answer is not JSON") from None


class ServiceAuthorization:
    """The service's authorization-server documents (cached) and its client registration."""

    def __init__(
        self, issuer: Callable[[], str], clock: Callable[[], float] = time.monotonic
    ) -> None:
        #: the authorization server's origin (the one the protected-resource metadata names)
        self.issuer = issuer
        self._clock = clock
        self._kept: dict[str, tuple[float, dict[str, Any]]] = {}

    def _timeout(self) -> aiohttp.ClientTimeout:
        return aiohttp.ClientTimeout(total=FETCH_SECS)

    async def document(self, path: str) -> dict[str, Any]:
        """The service's document at ``path`` (:data:`AS_METADATA` or :data:`OPENID`);
        :class:`Unavailable` when it cannot be read."""
        kept = self._kept.get(path)
        if kept is not None and self._clock() - kept[0] < TTL_SECS:
            return kept[1]
        url = self.issuer().rstrip("/") + path
        try:
            async with (
                aiohttp.ClientSession(timeout=self._timeout()) as http,
                http.get(url, allow_redirects=False) as response,
            ):
                if response.status != 200:
                    raise Unavailable(f"HTTP {response.status}")
                document = await _read(response)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise Unavailable(type(exc).__name__) from None
        if not isinstance(document, dict):
            raise Unavailable("the document is not a JSON object")
        self._kept[path] = (self._clock(), document)
        return document

    async def register(self, body: bytes) -> Answer:
        """Register the client with the service: its registration request as it came, to the
        ``registration_endpoint`` the service's metadata names; the service's answer."""
        endpoint = (await self.document(AS_METADATA)).get("registration_endpoint")
        if not isinstance(endpoint, str) or not endpoint.startswith(("https://", "http://")):
            raise Unavailable("the service names no registration endpoint")
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        try:
            async with (
                aiohttp.ClientSession(timeout=self._timeout()) as http,
                http.post(endpoint, data=body, headers=headers, allow_redirects=False) as response,
            ):
                return Answer(response.status, await _read(response))
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise Unavailable(type(exc).__name__) from None
