"""No 500 from stranger input (issue 10): odd bytes in headers, odd text in bodies, and a
property-based fuzz of bodies and headers. Nothing refused is ever charged."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any
from urllib.parse import urlsplit

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import LogCollector
from tests.support.fixtures import StubMarketFactory
from tests.support.stub_service import StubService, make_token

PAYER = "0x" + "aa" * 20


async def raw_request(url: str, head: bytes, body: bytes) -> bytes:
    """Send bytes httpx would refuse to send; return the status line."""
    where = urlsplit(url)
    reader, writer = await asyncio.open_connection(where.hostname, where.port)
    try:
        writer.write(head + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        await writer.drain()
        return await asyncio.wait_for(reader.readline(), 20)
    finally:
        writer.close()


async def test_a_non_ascii_byte_in_payment_signature_is_402_without_an_error_log(
    make_stub_market: StubMarketFactory, all_logs: LogCollector
) -> None:
    market = await make_stub_market(stub=StubService(balance=10))
    token = make_token(PAYER).encode()
    path = urlsplit(market.url).path.encode()
    statuses = []
    for bad in (token[:10] + b"\xff" + token[10:], b"\xc3\xa9" + token, token + b"\x80"):
        head = (
            b"POST " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
            b"Content-Type: application/json\r\npayment-signature: " + bad + b"\r\n"
        )
        statuses.append(await raw_request(market.url, head, b'{"prompt": "hi"}'))
    assert all(line.startswith(b"HTTP/1.1 402") for line in statuses), statuses
    assert market.stub.calls["verify"] == 0  # refused without asking the service
    assert market.stub.burned == 0
    assert not [line for line in all_logs.lines if line.startswith("ERROR")]


async def test_a_prompt_with_a_lone_surrogate_is_400_and_not_charged(
    make_stub_market: StubMarketFactory, all_logs: LogCollector
) -> None:
    market = await make_stub_market(stub=StubService(balance=10))
    async with httpx.AsyncClient(timeout=20) as http:
        response = await http.post(
            market.url,
            content=b'{"prompt": "hi \\ud800 there"}',
            headers={"payment-signature": make_token(PAYER), "Content-Type": "application/json"},
        )
    assert response.status_code == 400
    assert response.json()["error"] == "Bad Request"
    assert "Unicode" in response.json()["message"]
    assert response.json()["message"].endswith("send UTF-8 text.")
    assert market.stub.calls["verify"] == 0 and market.stub.burned == 0
    assert not [line for line in all_logs.lines if line.startswith("ERROR")]


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)
_bodies = st.one_of(
    st.binary(max_size=300),
    _json_values.map(lambda v: json.dumps(v).encode()),
    st.dictionaries(
        st.sampled_from(["prompt", "Prompt", "x"]), _json_values | st.text(), max_size=3
    ).map(lambda d: json.dumps(d).encode()),
    st.text(max_size=50).map(lambda t: json.dumps({"prompt": t}).encode()),
)
_signatures = st.one_of(
    st.none(),
    st.binary(max_size=64),
    st.just(b"VALID"),
    st.text(alphabet=st.characters(codec="latin-1", exclude_characters="\r\n"), max_size=64).map(
        lambda t: t.encode("latin-1")
    ),
)
_content_types = st.sampled_from(
    [b"application/json", b"text/plain", b"application/x+json", b"", b"application/json; x=\xff"]
)


async def test_fuzzed_bodies_and_headers_never_get_a_5xx_and_refusals_are_free(
    make_stub_market: StubMarketFactory,
) -> None:
    market = await make_stub_market(stub=StubService(balance=10_000))
    where = urlsplit(market.url)
    valid = make_token(PAYER).encode()
    seen: list[tuple[int, int]] = []

    def send(body: bytes, signature: bytes | None, content_type: bytes) -> int:
        import socket

        if signature == b"VALID":
            signature = valid
        lines = [
            b"POST " + where.path.encode() + b" HTTP/1.1",
            b"Host: 127.0.0.1",
            b"Connection: close",
            b"Content-Type: " + content_type,
            b"Content-Length: " + str(len(body)).encode(),
        ]
        if signature is not None:
            clean = signature.replace(b"\r", b"").replace(b"\n", b"").replace(b"\x00", b"")
            lines.append(b"payment-signature: " + clean)
        with socket.create_connection((where.hostname, where.port), timeout=20) as sock:
            sock.sendall(b"\r\n".join(lines) + b"\r\n\r\n" + body)
            status_line = sock.makefile("rb").readline()
        return int(status_line.split()[1])

    @settings(
        max_examples=150,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
        database=None,
    )
    @given(body=_bodies, signature=_signatures, content_type=_content_types)
    def fuzz(body: bytes, signature: bytes | None, content_type: bytes) -> None:
        burned_before = market.stub.burned
        status = send(body, signature, content_type)
        charged = market.stub.burned - burned_before
        seen.append((status, charged))
        assert status < 500, (body, signature, content_type)
        assert charged == (1 if status == 200 else 0)

    await asyncio.to_thread(fuzz)
    statuses = {status for status, _ in seen}
    assert {400, 402} <= statuses  # the fuzz reached both the checks and the payment step


async def _statuses(market: Any, requests: list[dict[str, Any]]) -> list[int]:
    async with httpx.AsyncClient(timeout=20) as http:
        return [(await http.post(market.url, **kw)).status_code for kw in requests]


async def test_refusals_and_oversize_tokens_log_no_error_and_quote_no_token(
    make_stub_market: StubMarketFactory, all_logs: LogCollector
) -> None:
    market = await make_stub_market(stub=StubService(balance=0))
    token = make_token(PAYER)
    statuses = await _statuses(
        market,
        [
            {"json": {"prompt": "hi"}},
            {"json": {"prompt": "hi"}, "headers": {"payment-signature": token}},
            {"json": {"prompt": "hi"}, "headers": {"payment-signature": "x" * 17000}},
            {"json": {"prompt": "hi"}, "headers": {"payment-signature": "x" * 30000}},
        ],
    )
    # an oversize token is refused unasked; one beyond any header limit is a quiet 400
    assert statuses == [402, 402, 402, 400]
    assert market.stub.calls["verify"] == 1
    assert not [r for r in all_logs.lines if r.startswith(logging.getLevelName(logging.ERROR))]
    assert "xxxxxxxxxx" not in all_logs.text and "LineTooLong" in all_logs.text
