"""Integers on the A2A wire (issue 43.3): the x402 envelope in a task's metadata keeps
``x402Version`` and ``maxTimeoutSeconds`` integers on every binding and mode, though the SDK
carries metadata as a protobuf ``Struct`` (doubles). Read as raw bytes, as a strict x402 parser
does."""

from __future__ import annotations

import json
from typing import Any

import httpx
from starlette.types import Message, Receive, Scope, Send

from svc_gateway.interop import a2a_x402 as x402
from svc_gateway.selling.ways_in.a2a.numbers import WholeNumbers, rewrite_events, rewrite_json

from .conftest import A2AMarket

V1 = {"A2A-Version": "1.0"}


def message_1x(text: str) -> dict[str, Any]:
    return {"messageId": "m-1x", "role": "ROLE_USER", "parts": [{"text": text}]}


def assert_integers(required: dict[str, Any], raw: bytes) -> None:
    assert type(required["x402Version"]) is int and required["x402Version"] == 2
    (offer,) = required["accepts"]
    assert type(offer["maxTimeoutSeconds"]) is int
    assert b'"x402Version":2.0' not in raw and b'"maxTimeoutSeconds":' in raw
    assert b".0," not in raw.split(b'"maxTimeoutSeconds":')[1][:12]


async def test_the_payment_required_envelope_carries_integers_on_every_binding(
    market: A2AMarket,
) -> None:
    old = {
        "jsonrpc": "2.0",
        "id": "1",
        "method": "message/send",
        "params": {
            "message": {
                "kind": "message",
                "role": "user",
                "messageId": "m-03",
                "parts": [{"kind": "text", "text": "old"}],
            }
        },
    }
    new = {
        "jsonrpc": "2.0",
        "id": "2",
        "method": "SendMessage",
        "params": {"message": message_1x("new")},
    }
    stream = {**new, "id": "3", "method": "SendStreamingMessage"}
    async with httpx.AsyncClient(timeout=30) as http:
        replies = {
            "0.3 JSON-RPC": await http.post(market.url, json=old),
            "1.0 JSON-RPC": await http.post(market.url, json=new, headers=V1),
            "HTTP+JSON": await http.post(
                market.agent.rest_url + "/message:send",
                json={"message": message_1x("rest")},
                headers=V1,
            ),
        }
        async with http.stream("POST", market.url, json=stream, headers=V1) as events:
            lines = [line async for line in events.aiter_lines() if line.startswith("data:")]
    for binding, reply in replies.items():
        assert reply.status_code == 200, (binding, reply.text)
        assert int(reply.headers["content-length"]) == len(reply.content)
        body = reply.json()
        task = body.get("result", body)
        task = task.get("task", task)
        meta = task["status"]["message"]["metadata"]
        assert meta[x402.STATUS] == x402.PAYMENT_REQUIRED, binding
        assert_integers(meta[x402.REQUIRED], reply.content)
    last = json.loads(lines[-1][5:])["result"]
    update = last.get("statusUpdate") or last["task"]
    assert_integers(update["status"]["message"]["metadata"][x402.REQUIRED], lines[-1].encode())
    assert await market.burned() == 0


def test_whole_floats_become_integers_and_anything_else_is_left_as_it_came() -> None:
    assert rewrite_json(b'{"a":2.0,"b":[1.5,3.0],"c":"2.0"}') == b'{"a":2,"b":[1.5,3],"c":"2.0"}'
    assert rewrite_json(b'{"big":1e+16}') == b'{"big":10000000000000000}'
    unchanged = b'{"a":1,"text":"no floats"}'
    assert rewrite_json(unchanged) is unchanged  # no point, no exponent: not parsed
    assert rewrite_json(b'{"cut":2.0') == b'{"cut":2.0'  # not JSON: as it came
    chunk = b'event: x\r\ndata: {"v":2.0}\r\n\r\n: ping\r\ndata:{"w":1.0}\n\n'
    assert rewrite_events(chunk) == b'event: x\r\ndata: {"v":2}\r\n\r\n: ping\r\ndata:{"w":1}\n\n'


async def test_other_responses_and_scopes_pass_through_untouched() -> None:
    seen: list[Message] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            seen.append({"type": "lifespan"})
            return
        ctype = scope["path"].encode()[1:]
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-type", ctype)]}
        )
        await send({"type": "http.response.body", "body": b"2.0", "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def receive() -> Message:
        return {"type": "http.request", "body": b""}

    async def send(message: Message) -> None:
        seen.append(message)

    layer = WholeNumbers(app)
    await layer({"type": "lifespan"}, receive, send)
    await layer({"type": "http", "path": "/text/plain"}, receive, send)
    assert seen[0] == {"type": "lifespan"}
    assert [m.get("body") for m in seen[2:]] == [b"2.0", b""]
    seen.clear()
    await layer({"type": "http", "path": "/application/json"}, receive, send)  # held, then one
    start, body = seen
    assert dict(start["headers"])[b"content-length"] == b"1" and body["body"] == b"2"
