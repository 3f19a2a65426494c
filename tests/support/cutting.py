"""A loopback proxy in front of a seller that loses paid answers in flight: it forwards each
request as it came (its Host header too), and for the first ``cuts`` paid answers (HTTP: a
``payment-response`` header; MCP: a ``tools/call`` whose result carries
``x402/payment-response``) it sends the status and headers, then closes the connection
before the body (each paid answer once: its replay to a retry, with the same transaction,
goes through). The one fault a real seller cannot produce on demand; everything else is
the seller's own answer."""

from __future__ import annotations

import json

import aiohttp
from aiohttp import web

from svc_gateway.encoding import decode_b64_json

#: hop-by-hop headers a proxy does not forward
HOP = frozenset({"content-length", "transfer-encoding", "connection", "keep-alive", "date"})


def _mcp_receipt(body: bytes) -> dict[str, object] | None:
    """The receipt of an MCP tool result (JSON or one SSE event), when it carries one."""
    text = body.decode("utf-8", errors="replace")
    for line in text.splitlines() or [text]:
        data = line.removeprefix("data:").strip()
        if '"x402/payment-response"' not in data:
            continue
        try:
            receipt = json.loads(data)["result"]["_meta"]["x402/payment-response"]
        except (ValueError, KeyError, TypeError):
            continue
        return receipt if isinstance(receipt, dict) else None
    return None


class CutProxy:
    def __init__(self, cuts: int = 1) -> None:
        self.upstream = ""  # the seller's origin, set once it is known
        self.cuts = cuts
        #: receipts of the answers cut (paid for, lost on the way back)
        self.lost: list[dict[str, object]] = []
        self.origin = ""
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._seen: set[object] = set()  # the transactions of the answers cut

    async def start(self) -> str:
        self._session = aiohttp.ClientSession(auto_decompress=False)
        app = web.Application(client_max_size=4 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.origin = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self.origin

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None and self.upstream
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
        async with self._session.request(
            request.method,
            self.upstream + request.path_qs,
            data=await request.read(),
            headers=headers,
            allow_redirects=False,
        ) as answer:
            body = await answer.read()
            kept = {k: v for k, v in answer.headers.items() if k.lower() not in HOP}
        receipt = decode_b64_json(answer.headers.get("payment-response")) or _mcp_receipt(body)
        first = receipt is not None and receipt.get("transaction") not in self._seen
        if receipt is not None and first and self.cuts > 0:  # each paid answer cut once
            self._seen.add(receipt.get("transaction"))
            self.cuts -= 1
            self.lost.append(receipt)
            response = web.StreamResponse(status=answer.status, headers=kept)
            response.content_length = len(body)
            await response.prepare(request)  # the headers go out...
            assert request.transport is not None
            request.transport.close()  # ...and the answer is lost
            return response
        return web.Response(status=answer.status, body=body, headers=kept)
