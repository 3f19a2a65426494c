"""One paid POST with a bounded read: what svc_queryAgent and ``svc pay`` both send."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..interop.agent_card import TooLarge, read_limited
from .answers import MAX_ANSWER_BYTES, AgentReply

if TYPE_CHECKING:
    import httpx


async def send_paid(
    http: httpx.AsyncClient,
    url: str,
    body: Any,
    headers: dict[str, str],
) -> AgentReply:
    """POST ``body`` as JSON with ``headers`` (the ``payment-signature``, when paying); read at
    most :data:`MAX_ANSWER_BYTES` of the answer."""
    async with http.stream(
        "POST", url, json=body, headers={"Accept": "application/json", **headers}
    ) as response:
        received = {k.lower(): v for k, v in response.headers.items()}
        try:
            data, truncated = await read_limited(response, MAX_ANSWER_BYTES), False
        except TooLarge as exc:
            data, truncated = exc.head, True
        return AgentReply(response.status_code, received, data, truncated)
