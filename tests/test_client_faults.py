"""Faults the sandbox cannot produce on demand, injected through the httpx transport."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest

from svc_gateway import errors
from svc_gateway.client import ServiceClient
from svc_gateway.models import PaymentRequirement, PlanMetadata
from svc_gateway.pricing import crypto_price, fixed_credits
from tests.helpers import fake_key

BASE = "http://127.0.0.1:9/api/v1"
ADDRESS = "0x" + "12" * 20


class Recorder:
    """A scripted transport: answers in order, records every request."""

    def __init__(self, *answers: httpx.Response | Exception) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


def make(recorder: Callable[[httpx.Request], httpx.Response], key: str | None = None):
    sleeps: list[float] = []

    async def sleep(delay: float) -> None:
        sleeps.append(delay)

    client = ServiceClient(
        BASE,
        key or fake_key(address=ADDRESS),
        transport=httpx.MockTransport(recorder),
        sleep=sleep,
        max_retries=3,
    )
    return client, sleeps


def ok(body: object) -> httpx.Response:
    return httpx.Response(200, json=body)


def fail(status: int, code: str = "X", **headers: str) -> httpx.Response:
    return httpx.Response(status, json={"code": code, "message": "nope"}, headers=headers)


BALANCE = {"balance": "7", "isSubscriber": True}


async def test_a_read_is_retried_after_503() -> None:
    rec = Recorder(fail(503), fail(503), ok(BALANCE))
    client, sleeps = make(rec)
    balance = await client.get_plan_balance("1")
    assert balance.balance == 7
    assert len(rec.requests) == 3 and len(sleeps) == 2
    assert sleeps[1] >= sleeps[0] / 2  # backoff grows (with jitter)
    await client.aclose()


async def test_an_order_is_never_retried() -> None:
    rec = Recorder(fail(503), ok({"success": True}))
    client, sleeps = make(rec)
    with pytest.raises(errors.ServiceUnavailable):
        await client.order_plan("1")
    assert len(rec.requests) == 1 and sleeps == []
    await client.aclose()


async def test_token_creation_is_not_retried_on_connection_error() -> None:
    rec = Recorder(httpx.ConnectError("refused"))
    client, _ = make(rec)
    with pytest.raises(errors.TransportError) as info:
        await client.create_access_token("1", "d-1")
    assert info.value.code == "network_error"
    assert len(rec.requests) == 1
    await client.aclose()


async def test_connection_errors_on_reads_are_retried_then_reported() -> None:
    rec = Recorder(httpx.ConnectError("refused"))
    client, sleeps = make(rec)
    with pytest.raises(errors.TransportError):
        await client.get_plan("1")
    assert len(rec.requests) == 4 and len(sleeps) == 3
    await client.aclose()


async def test_retry_after_is_honoured() -> None:
    rec = Recorder(fail(429, "RATE", **{"Retry-After": "2"}), ok(BALANCE))
    client, sleeps = make(rec)
    await client.get_plan_balance("1")
    assert sleeps == [2.0]
    await client.aclose()


async def test_rate_limit_surfaces_retry_after_when_not_retried() -> None:
    rec = Recorder(fail(429, "RATE", **{"Retry-After": "30"}))
    client, _ = make(rec)
    with pytest.raises(errors.RateLimited) as info:
        await client.order_plan("1")
    assert info.value.retry_after == 30.0 and "30" in info.value.hint
    await client.aclose()


async def test_settle_retries_only_with_agent_request_id() -> None:
    envelope = PaymentRequirement()
    settled = {"success": True, "transaction": "0xabc", "creditsRedeemed": "1"}
    rec = Recorder(fail(502), ok(settled))
    client, _ = make(rec)
    result = await client.settle(envelope, "tok", 1, "req-1")
    assert result.success and len(rec.requests) == 2
    bodies = [json.loads(r.content) for r in rec.requests]
    assert all(b["agentRequestId"] == "req-1" for b in bodies)

    rec2 = Recorder(fail(502), ok(settled))
    client2, _ = make(rec2)
    with pytest.raises(errors.ServiceUnavailable):
        await client2.settle(envelope, "tok", 1, None)
    assert len(rec2.requests) == 1
    await client.aclose()
    await client2.aclose()


async def test_timeout_becomes_request_timeout() -> None:
    rec = Recorder(httpx.ReadTimeout("slow"))
    client, _ = make(rec)
    with pytest.raises(errors.RequestTimeout) as info:
        await client.order_plan("1")
    assert info.value.code == "timeout"
    await client.aclose()


async def test_headers_version_and_auth() -> None:
    rec = Recorder(ok({"id": "1"}), ok({"total": 0, "plans": []}))
    client, _ = make(rec)
    await client.get_plan("1")
    await client.list_plans()
    public, private = rec.requests
    assert public.headers["Service-Version"] == private.headers["Service-Version"] == "1.1"
    assert "Authorization" not in public.headers
    assert private.headers["Authorization"].startswith("Bearer local:")
    assert private.url.params["offset"] == "10"
    await client.aclose()


async def test_error_envelope_variants() -> None:
    rec = Recorder(httpx.Response(400, json={"errorCode": "BCK.COMMON.0026", "message": "lost"}))
    client, _ = make(rec)
    with pytest.raises(errors.InvalidRequest) as info:
        await client.get_plan("1")
    assert info.value.code == "BCK.COMMON.0026"
    rec2 = Recorder(httpx.Response(502, text="<html>" + "x" * 500))
    client2, _ = make(rec2)
    client2.max_retries = 0
    with pytest.raises(errors.ServiceUnavailable) as info2:
        await client2.get_plan("1")
    assert info2.value.code == "http_502" and len(info2.value.message) < 230
    await client.aclose()
    await client2.aclose()


async def test_big_integers_go_out_as_strings() -> None:
    rec = Recorder(ok({"planId": "9"}))
    client, _ = make(rec)
    big = 10**30
    await client.register_plan(
        PlanMetadata(name="p"), crypto_price([big], [ADDRESS]), fixed_credits(2**60, 1)
    )
    body = json.loads(rec.requests[0].content)
    assert body["priceConfig"]["amounts"] == [str(big)]
    assert body["creditsConfig"]["amount"] == str(2**60)
    assert isinstance(body["nonce"], str)
    await client.aclose()


async def test_no_secret_in_errors_or_repr() -> None:
    key = fake_key(address=ADDRESS)
    rec = Recorder(fail(401, "BCK.APIKEY.0004"))
    client, _ = make(rec, key)
    with pytest.raises(errors.AuthenticationError) as info:
        await client.list_plans()
    secret = key.split(":", 1)[1]
    for text in (str(info.value), repr(info.value), repr(client), info.value.hint):
        assert secret not in text
    assert "/svc_login" in info.value.hint
    await client.aclose()


async def test_order_answer_with_success_false_is_an_error() -> None:
    rec = Recorder(ok({"success": False, "message": "insufficient funds"}))
    client, _ = make(rec)
    with pytest.raises(errors.InvalidRequest, match="insufficient funds"):
        await client.order_plan("1")
    await client.aclose()


async def test_fiat_checkout_url_read_from_every_field_name() -> None:
    for body in (
        {"result": {"checkoutLink": "https://pay/1"}},
        {"result": {"checkoutUrl": "https://pay/1"}},
        {"checkoutUrl": "https://pay/1"},
        {"checkoutLink": "https://pay/1"},
    ):
        client, _ = make(Recorder(ok(body)))
        assert (await client.order_fiat_plan("1")).checkout_url == "https://pay/1"
        await client.aclose()
    client, _ = make(Recorder(ok({"result": {}})))
    with pytest.raises(errors.ProtocolError):
        await client.order_fiat_plan("1")
    await client.aclose()


async def test_expired_delegation_is_replaced_once() -> None:
    created = iter(["d-1", "d-2"])

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/delegation/create"):
            return ok({"delegationId": next(created)})
        body = json.loads(request.content)
        if body["delegationConfig"]["delegationId"] == "d-1":
            return httpx.Response(403, json={"code": "BCK.X402.0013", "message": "expired"})
        return ok({"accessToken": "tok-2"})

    client, _ = make(handler)
    assert await client.get_access_token("1") == "tok-2"
    await client.aclose()
