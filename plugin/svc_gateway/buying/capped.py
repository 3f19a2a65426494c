"""An httpx transport whose response bodies stop at a size: the A2A buyer's bounded read.

The a2a-sdk client reads each reply whole; a reply that announces its size is refused by the
``content-length`` check, and a chunked one (no length) is cut here as it arrives.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from ..chat.failure import ToolFailure
from .answers import MAX_ANSWER_BYTES

if TYPE_CHECKING:
    import httpx


def capped_transport(limit: int) -> httpx.AsyncBaseTransport:
    """An httpx transport whose every response body stops at ``limit`` bytes: the SDK's client
    reads a reply whole, and a chunked one announces no size for the ``content-length`` check."""
    import httpx

    class Capped(httpx.AsyncByteStream):
        def __init__(self, inner: httpx.AsyncByteStream) -> None:
            self.inner = inner

        async def __aiter__(self) -> AsyncIterator[bytes]:
            size = 0
            async for chunk in self.inner:
                size += len(chunk)
                if size > limit:
                    raise too_large_failure(f"more than {limit}")
                yield chunk

        async def aclose(self) -> None:
            await self.inner.aclose()

    class Transport(httpx.AsyncHTTPTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            response = await super().handle_async_request(request)
            assert isinstance(response.stream, httpx.AsyncByteStream)
            response.stream = Capped(response.stream)
            return response

    return Transport()


def too_large_failure(size: str) -> ToolFailure:
    return ToolFailure(
        "answer_too_large",
        f"The agent's reply is {size} bytes, more than the "
        f"{MAX_ANSWER_BYTES // 1024} KiB svc_queryAgent reads",
        "Ask for a shorter answer, or call the agent another way.",
    )
