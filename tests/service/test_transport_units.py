"""The client's plumbing, piece by piece: defaults, the pool, request encoding, answer parsing."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from pydantic import Field

from svc_gateway.sandbox import SandboxServer
from svc_gateway.service import errors
from svc_gateway.service.client import ServiceClient
from svc_gateway.service.models import PlanBalance, WireModel
from svc_gateway.service.transport import (
    POOL_SIZE,
    data_of,
    default_session_factory,
    parse_answer,
    parse_model,
    require_str,
)
from tests.helpers import fake_key
from tests.service.mocking import aioresponses
from tests.service.proxy import FaultProxy, canned, start_proxy

BASE = "http://127.0.0.1:9/api/v1"
ANY = re.compile(r"^http://127\.0\.0\.1:9/.*$")
ADDRESS = "0x" + "34" * 20


def calls(mock: aioresponses) -> list[tuple[str, str, dict[str, Any]]]:
    return [(k[0], str(k[1]), c.kwargs) for k, cs in mock.requests.items() for c in cs]


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
async def client(sleeps: list[float]) -> AsyncIterator[ServiceClient]:
    async def sleep(delay: float) -> None:
        sleeps.append(delay)

    c = ServiceClient(BASE, fake_key(address=ADDRESS), sleep=sleep)  # every other default kept
    yield c
    await c.aclose()


# -- defaults --------------------------------------------------------------------------------


async def test_defaults_three_retries_quarter_second_backoff_thirty_second_deadline(
    client: ServiceClient, sleeps: list[float]
) -> None:
    assert client.timeout == 30.0
    with aioresponses() as mock:
        for _ in range(5):
            mock.get(ANY, status=503, payload={})
        with pytest.raises(errors.ServiceUnavailable):
            await client.get_plan("1")
        assert len(calls(mock)) == 4
    assert len(sleeps) == 3
    assert 0.125 <= sleeps[0] <= 0.25 and 0.25 <= sleeps[1] <= 0.5 and 0.5 <= sleeps[2] <= 1.0


@pytest.mark.parametrize(("value", "slept"), [("8", [8.0]), ("8.5", [])])
async def test_retry_after_up_to_the_eight_second_cap_is_slept(
    client: ServiceClient, sleeps: list[float], value: str, slept: list[float]
) -> None:
    with aioresponses() as mock:
        mock.get(ANY, status=429, payload={}, headers={"Retry-After": value})
        mock.get(ANY, payload={"id": "1"})
        try:
            await client.get_plan("1")
        except errors.RateLimited as exc:
            assert exc.retry_after == float(value)
    assert sleeps == slept


def test_environment_from_the_key_unless_given() -> None:
    assert ServiceClient(BASE, fake_key(env="live")).environment == "live"
    assert ServiceClient(BASE, fake_key(env="live"), environment="local").environment == "local"
    assert ServiceClient(BASE, fake_key(env="moon")).environment is None
    assert ServiceClient(BASE).environment is None
    assert ServiceClient("http://127.0.0.1:9/X/").base_url == "http://127.0.0.1:9/X"
    anonymous = ServiceClient(BASE + "/")
    assert anonymous.base_url == BASE and anonymous.address is None
    assert not anonymous.authenticated
    assert repr(anonymous) == f"ServiceClient(base_url='{BASE}', account='anonymous')"


async def test_the_default_pool_keeps_no_cookies_and_64_connections() -> None:
    session = default_session_factory()
    try:
        assert isinstance(session.cookie_jar, aiohttp.DummyCookieJar)
        connector = session.connector
        assert isinstance(connector, aiohttp.TCPConnector)
        assert connector.limit == POOL_SIZE == 64 and connector.limit_per_host == POOL_SIZE
    finally:
        await session.close()


# -- requests --------------------------------------------------------------------------------


async def test_bodies_are_compact_json_and_reads_send_none(client: ServiceClient) -> None:
    with aioresponses() as mock:
        mock.post(ANY, payload={"result": {"checkoutUrl": "https://pay/1"}})
        mock.get(ANY, payload={"id": "1"})
        await client.order_fiat_plan("7")
        await client.get_plan("1")
        (_, _, post), (_, _, get) = calls(mock)
    assert post["data"] == b'{"planId":"7","sessionType":"embedded"}'
    assert get["data"] is None
    assert post["allow_redirects"] is False and get["allow_redirects"] is False


async def test_a_trailing_slash_in_base_url_makes_no_double_slash() -> None:
    c = ServiceClient(BASE + "/", fake_key(address=ADDRESS))
    with aioresponses() as mock:
        mock.get(ANY, payload={"id": "1"})
        await c.get_plan("1")
        assert calls(mock)[0][1] == f"{BASE}/protocol/plans/1"
    await c.aclose()


@pytest.fixture
async def proxy(sandbox: SandboxServer) -> AsyncIterator[FaultProxy]:
    proxy = await start_proxy(sandbox.base_url)
    yield proxy
    await proxy.close()


async def test_a_redirect_is_not_followed_with_the_key(
    proxy: FaultProxy, sandbox: SandboxServer, builder: dict[str, str], plan_id: str
) -> None:
    base = proxy.url(sandbox.base_url)
    proxy.always[f"protocol/plans/{plan_id}"] = canned(
        302, {}, Location=f"{base}/protocol/plans/elsewhere"
    )
    c = ServiceClient(base, builder["apiKey"])
    async with asyncio.timeout(20):
        with pytest.raises(errors.InvalidRequest) as info:
            await c.get_plan(plan_id)
    assert info.value.status == 302 and proxy.calls["protocol/plans/elsewhere"] == 0
    await c.aclose()


# -- answers ---------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [300, 304])
async def test_3xx_is_not_success(client: ServiceClient, status: int) -> None:
    with aioresponses() as mock:
        mock.get(ANY, status=status, payload={"id": "1"})
        with pytest.raises(errors.InvalidRequest) as info:
            await client.get_plan("1")
    assert info.value.status == status


async def test_messages_name_the_call(client: ServiceClient) -> None:
    client.max_retries = 0
    with aioresponses() as mock:
        mock.get(ANY, status=200, body="<html>")
        mock.get(ANY, exception=TimeoutError())
        mock.get(ANY, exception=aiohttp.ServerDisconnectedError())
        mock.get(ANY, status=503, body=b"\xff\xfe down")
        mock.get(ANY, status=503, body="")
        seen = []
        for _ in range(5):
            with pytest.raises(errors.ServiceError) as info:
                await client.get_plan("1")
            seen.append(info.value)
    call = "GET protocol/plans/1"
    assert seen[0].message == f"{call} answered 200 with a non-JSON body"
    assert seen[1].message.startswith(f"{call} got no complete answer within ")
    assert isinstance(seen[1], errors.RequestTimeout) and seen[1].code == "timeout"
    assert seen[2].message == (
        f"Could not reach the service at http://127.0.0.1:9 (ServerDisconnectedError) for {call}"
    )
    assert (seen[2].code, seen[2].status) == ("network_error", None)
    assert seen[3].message == "HTTP 503: \ufffd\ufffd down"  # not UTF-8: replaced, not raised
    assert seen[4].message == "HTTP 503: Service Unavailable"  # the reason phrase stands in
    with client.deadline(-1), pytest.raises(errors.RequestTimeout) as late:
        await client.get_plan("1")
    assert late.value.message == f"{call} ran out of time before it could be sent"


async def test_an_expired_key_says_so_without_a_status() -> None:
    c = ServiceClient(BASE, fake_key(address=ADDRESS, exp=1))
    with pytest.raises(errors.AuthenticationError) as info:
        await c.list_plans()
    await c.aclose()
    assert info.value.message == "The API key has expired" and info.value.status is None


def test_data_of_unwraps_only_an_object_under_data() -> None:
    assert data_of({"data": {"agentId": "1"}, "txHash": "0x"}) == {"agentId": "1"}
    assert data_of({"data": "x", "agentId": "2"}) == {"data": "x", "agentId": "2"}
    assert data_of({"agentId": "3"}) == {"agentId": "3"}
    assert data_of(["a"]) == {} and data_of(None) == {}


def test_require_str_refuses_missing_empty_and_non_strings() -> None:
    assert require_str({"planId": "9"}, "planId") == "9"
    for body in ({}, {"planId": ""}, {"planId": 9}, ["planId"], None):
        with pytest.raises(errors.ProtocolError) as info:
            require_str(body, "planId")
        assert info.value.code == "bad_response"
        assert info.value.message == "The service's answer has no planId"


class Deep(WireModel):
    a: int
    b: int
    c: int
    d: int
    inner: PlanBalance = Field(default_factory=PlanBalance)


def test_parse_model_names_up_to_three_bad_fields() -> None:
    with pytest.raises(errors.ProtocolError) as info:
        parse_model(Deep, {"inner": {"balance": "x"}})
    assert info.value.code == "bad_response"
    assert info.value.message == "The service's answer did not match Deep (a, b, c)"
    with pytest.raises(errors.ProtocolError) as nested:
        parse_model(Deep, {"a": 1, "b": 1, "c": 1, "d": 1, "inner": {"balance": "x"}})
    assert nested.value.message == "The service's answer did not match Deep (inner.balance)"


def test_an_answer_read_from_its_bytes_is_the_model_the_decoded_json_gives() -> None:
    from svc_gateway.service.models import SettleResult, VerifyResult

    answers: list[tuple[type[WireModel], Any]] = [
        (VerifyResult, {"isValid": True, "payer": "0xab", "agentRequestId": "r-1"}),
        (VerifyResult, {"isValid": "true", "agentRequest": {"agentRequestId": 7, "x": [1.5]}}),
        (SettleResult, {"success": True, "creditsRedeemed": "1", "remainingBalance": 2**70}),
        (SettleResult, {"success": 1, "creditsRedeemed": 3, "transaction": "0x1", "extra": None}),
    ]
    for model, data in answers:
        raw = json.dumps(data).encode()
        assert parse_answer(model, 200, raw, "POST", "x402/settle") == parse_model(model, data)
    # not an object, not UTF-8, NaN, empty: the general way, with its own answer or refusal
    utf16 = json.dumps({"isValid": True}).encode("utf-16")
    assert parse_answer(VerifyResult, 200, utf16, "POST", "x") == VerifyResult(is_valid=True)
    nan = b'{"success": true, "x": NaN}'
    assert parse_answer(SettleResult, 200, nan, "POST", "x").success
    assert parse_answer(VerifyResult, 200, b"", "POST", "x") == VerifyResult()
    with pytest.raises(errors.ProtocolError, match="non-JSON body"):
        parse_answer(VerifyResult, 200, b'{"isValid": tru', "POST", "x")


def test_a_malformed_answer_read_from_its_bytes_is_refused_as_before() -> None:
    raw = json.dumps({"inner": {"balance": "x"}}).encode()
    with pytest.raises(errors.ProtocolError) as info:
        parse_answer(Deep, 200, raw, "POST", "x")
    assert info.value.code == "bad_response"
    assert info.value.message == "The service's answer did not match Deep (a, b, c)"
    with pytest.raises(errors.ProtocolError) as listed:
        parse_answer(Deep, 200, b"[1, 2]", "POST", "x")
    assert listed.value.message.startswith("The service's answer did not match Deep")


def test_request_bodies_are_json_the_service_reads() -> None:
    body = json.loads(b'{"planId":"7","sessionType":"embedded"}')
    assert body == {"planId": "7", "sessionType": "embedded"}


def test_an_empty_error_answer_without_a_reason_still_reads() -> None:
    from svc_gateway.service.transport import _envelope

    assert _envelope(503, "", b"") == (None, "HTTP 503", None)
    assert _envelope(502, "Bad Gateway", b"  ") == (None, "HTTP 502: Bad Gateway", None)
    assert _envelope(400, "", b'{"code": 5, "message": ""}') == ("5", "HTTP 400", None)


async def test_a_wait_that_would_end_exactly_at_the_deadline_is_not_taken(
    client: ServiceClient, sleeps: list[float]
) -> None:
    now = [0.0]
    client._clock = lambda: now[0]
    client.timeout = 2.0
    with aioresponses() as mock:
        mock.get(ANY, status=503, payload={}, headers={"Retry-After": "2"})
        mock.get(ANY, payload={"id": "1"})
        with pytest.raises(errors.ServiceUnavailable) as info:
            await client.get_plan("1")
    assert sleeps == [] and info.value.retry_after == 2.0
