"""Faults the sandbox cannot produce on demand, injected with aioresponses (canned answers).

No test sleeps through real backoff: the client's ``sleep`` seam records the delays instead.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

import aiohttp
import pytest

from svc_gateway.service import errors
from svc_gateway.service.client import ServiceClient
from svc_gateway.service.models import PaymentRequirement, PlanMetadata
from svc_gateway.service.pricing import crypto_price, fixed_credits
from tests.helpers import fake_key
from tests.service.mocking import aioresponses

BASE = "http://127.0.0.1:9/api/v1"
ADDRESS = "0x" + "12" * 20
ANY = re.compile(r"^http://127\.0\.0\.1:9/.*$")
BALANCE = {"balance": "7", "isSubscriber": True}


@dataclass
class Harness:
    """A client whose sleeps are recorded and whose clock only moves when it sleeps."""

    client: ServiceClient
    mock: aioresponses
    sleeps: list[float] = field(default_factory=list)
    now: float = 1000.0

    def calls(self) -> list[tuple[str, str, dict[str, Any]]]:
        """(method, url, kwargs) of every request, in order."""
        seen = [
            (key[0], str(key[1]), call.kwargs)
            for key, calls in self.mock.requests.items()
            for call in calls
        ]
        return seen

    def bodies(self) -> list[Any]:
        return [json.loads(kw["data"]) for _, _, kw in self.calls() if kw.get("data")]


@pytest.fixture
def mock() -> Iterator[aioresponses]:
    with aioresponses() as m:
        yield m


@pytest.fixture
async def h(mock: aioresponses) -> AsyncIterator[Harness]:
    harness = Harness(client=None, mock=mock)  # type: ignore[arg-type]

    async def sleep(delay: float) -> None:
        harness.sleeps.append(delay)
        harness.now += delay

    harness.client = ServiceClient(
        BASE,
        fake_key(address=ADDRESS),
        sleep=sleep,
        clock=lambda: harness.now,
        max_retries=3,
        backoff_base=0.25,
        backoff_cap=8.0,
    )
    yield harness
    await harness.client.aclose()


def fail(status: int, code: str = "X", **headers: str) -> dict[str, Any]:
    return {"status": status, "payload": {"code": code, "message": "nope"}, "headers": headers}


# -- retries ---------------------------------------------------------------------------------


async def test_a_read_is_retried_after_503_with_growing_backoff(h: Harness) -> None:
    h.mock.get(ANY, **fail(503))
    h.mock.get(ANY, **fail(503))
    h.mock.get(ANY, payload=BALANCE)
    balance = await h.client.get_plan_balance("1")
    assert balance.balance == 7
    assert len(h.calls()) == 3 and len(h.sleeps) == 2
    assert 0.125 <= h.sleeps[0] <= 0.25 and 0.25 <= h.sleeps[1] <= 0.5  # base·2^n, jittered


async def test_backoff_is_capped(h: Harness) -> None:
    h.client.backoff_base, h.client.backoff_cap, h.client.max_retries = 4.0, 5.0, 3
    h.client.timeout = 600
    for _ in range(4):
        h.mock.get(ANY, **fail(502))
    with pytest.raises(errors.ServiceUnavailable):
        await h.client.get_plan("1")
    assert len(h.sleeps) == 3 and max(h.sleeps) <= 5.0 and h.sleeps[-1] >= 2.5


@pytest.mark.parametrize("status", [429, 502, 503, 504])
async def test_each_transient_status_is_retried_on_reads(h: Harness, status: int) -> None:
    h.mock.get(ANY, **fail(status))
    h.mock.get(ANY, payload={"id": "1"})
    assert (await h.client.get_plan("1")).id == "1"
    assert len(h.calls()) == 2


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 500])
async def test_other_errors_are_not_retried(h: Harness, status: int) -> None:
    h.mock.get(ANY, **fail(status))
    h.mock.get(ANY, payload={"id": "1"})
    with pytest.raises(errors.ServiceError):
        await h.client.get_plan("1")
    assert len(h.calls()) == 1 and h.sleeps == []


async def test_an_order_is_never_retried(h: Harness) -> None:
    h.mock.post(ANY, **fail(503))
    h.mock.post(ANY, payload={"success": True})
    with pytest.raises(errors.ServiceUnavailable):
        await h.client.order_plan("1")
    assert len(h.calls()) == 1 and h.sleeps == []


async def test_registrations_are_never_retried(h: Harness) -> None:
    h.mock.post(ANY, exception=aiohttp.ServerDisconnectedError())
    with pytest.raises(errors.TransportError):
        await h.client.register_plan(
            PlanMetadata(name="p"), crypto_price([1], [ADDRESS]), fixed_credits(1)
        )
    assert len(h.calls()) == 1 and h.sleeps == []


async def test_token_creation_is_not_retried_on_connection_error(h: Harness) -> None:
    h.mock.post(ANY, exception=aiohttp.ClientConnectionError("refused"))
    with pytest.raises(errors.TransportError) as info:
        await h.client.create_access_token("1", "d-1")
    assert info.value.code == "network_error" and info.value.status is None
    assert len(h.calls()) == 1


async def test_connection_errors_on_reads_are_retried_then_reported(h: Harness) -> None:
    for _ in range(4):
        h.mock.get(ANY, exception=aiohttp.ClientConnectionError("refused"))
    with pytest.raises(errors.TransportError) as info:
        await h.client.get_plan("1")
    assert "ClientConnectionError" in info.value.message and "GET" in info.value.message
    assert len(h.calls()) == 4 and len(h.sleeps) == 3


async def test_timeout_becomes_request_timeout_and_is_retried_on_reads(h: Harness) -> None:
    h.mock.get(ANY, exception=TimeoutError())
    h.mock.get(ANY, payload={"id": "1"})
    assert (await h.client.get_plan("1")).id == "1"
    h.mock.post(ANY, exception=TimeoutError())
    with pytest.raises(errors.RequestTimeout) as info:
        await h.client.order_plan("1")
    assert info.value.code == "timeout"


async def test_settle_retries_only_with_agent_request_id(h: Harness) -> None:
    envelope = PaymentRequirement()
    settled = {"success": True, "transaction": "0xabc", "creditsRedeemed": "1"}
    h.mock.post(ANY, **fail(502))
    h.mock.post(ANY, payload=settled)
    result = await h.client.settle(envelope, "tok", 1, "req-1")
    assert result.success and len(h.calls()) == 2
    assert [b["agentRequestId"] for b in h.bodies()] == ["req-1", "req-1"]

    h.mock.post(ANY, **fail(502))
    h.mock.post(ANY, payload=settled)
    with pytest.raises(errors.ServiceUnavailable):
        await h.client.settle(envelope, "tok", 1, None)
    assert len(h.calls()) == 3


async def test_verify_is_retried(h: Harness) -> None:
    h.mock.post(ANY, **fail(503))
    h.mock.post(ANY, payload={"isValid": True})
    assert (await h.client.verify(PaymentRequirement(), "tok", 1)).is_valid
    assert len(h.calls()) == 2


# -- Retry-After and the deadline --------------------------------------------------------------


async def test_retry_after_seconds_is_honoured(h: Harness) -> None:
    h.mock.get(ANY, **fail(429, "RATE", **{"Retry-After": "2"}))
    h.mock.get(ANY, payload=BALANCE)
    await h.client.get_plan_balance("1")
    assert h.sleeps == [2.0]


async def test_retry_after_on_503_is_honoured(h: Harness) -> None:
    h.mock.get(ANY, **fail(503, "DOWN", **{"Retry-After": "3"}))
    h.mock.get(ANY, payload=BALANCE)
    await h.client.get_plan_balance("1")
    assert h.sleeps == [3.0]


@pytest.mark.parametrize("garbage", ["soon", "", "1 minute", "nan", "Thu, 99 Foo 2026"])
async def test_garbage_retry_after_falls_back_to_backoff(h: Harness, garbage: str) -> None:
    h.mock.get(ANY, **fail(429, "RATE", **{"Retry-After": garbage}))
    h.mock.get(ANY, payload=BALANCE)
    assert (await h.client.get_plan_balance("1")).balance == 7
    assert len(h.sleeps) == 1 and 0.125 <= h.sleeps[0] <= 0.25


@pytest.mark.parametrize("value", ["-5", "0", "Wed, 21 Oct 2015 07:28:00 GMT"])
async def test_negative_zero_or_past_retry_after_waits_the_floor(h: Harness, value: str) -> None:
    from svc_gateway.service.transport import RETRY_AFTER_FLOOR

    for _ in range(3):
        h.mock.get(ANY, **fail(429, "RATE", **{"Retry-After": value}))
    h.mock.get(ANY, payload=BALANCE)
    await h.client.get_plan_balance("1")
    assert h.sleeps == [RETRY_AFTER_FLOOR] * 3  # never a zero-delay hot loop


async def test_huge_retry_after_is_surfaced_not_slept(h: Harness) -> None:
    from svc_gateway.service.transport import RETRY_AFTER_MAX

    h.mock.get(ANY, **fail(429, "RATE", **{"Retry-After": "1e30"}))
    h.mock.get(ANY, payload=BALANCE)
    with pytest.raises(errors.RateLimited) as info:
        await h.client.get_plan_balance("1")
    assert info.value.retry_after == RETRY_AFTER_MAX and h.sleeps == []
    assert len(h.calls()) == 1


async def test_rate_limit_surfaces_retry_after_when_not_retried(h: Harness) -> None:
    h.mock.post(ANY, **fail(429, "RATE", **{"Retry-After": "30"}))
    with pytest.raises(errors.RateLimited) as info:
        await h.client.order_plan("1")
    assert info.value.retry_after == 30.0 and "retry in 30 s" in info.value.hint


async def test_retries_share_one_deadline(h: Harness) -> None:
    """With 1 s for the whole call, backoff that would overrun it ends the call instead."""
    h.client.timeout = 1.0
    h.client.backoff_base = 0.4
    for _ in range(4):
        h.mock.get(ANY, **fail(503))
    with pytest.raises(errors.ServiceUnavailable):
        await h.client.get_plan("1")
    assert sum(h.sleeps) < 1.0
    assert len(h.calls()) == len(h.sleeps) + 1 < 4


async def test_retry_after_beyond_the_deadline_ends_the_call(h: Harness) -> None:
    h.client.timeout = 5.0
    h.mock.get(ANY, **fail(503, "DOWN", **{"Retry-After": "6"}))
    h.mock.get(ANY, payload={"id": "1"})
    with pytest.raises(errors.ServiceUnavailable) as info:
        await h.client.get_plan("1")
    assert info.value.retry_after == 6.0 and h.sleeps == [] and len(h.calls()) == 1


async def test_an_exhausted_deadline_sends_nothing(h: Harness) -> None:
    with h.client.deadline(0), pytest.raises(errors.RequestTimeout) as info:
        await h.client.get_plan("1")
    assert h.calls() == [] and info.value.code == "timeout"


async def test_deadline_caps_the_calls_inside_and_nests_to_the_tighter(h: Harness) -> None:
    h.client.timeout = 600
    for _ in range(8):
        h.mock.get(ANY, **fail(503, "DOWN", **{"Retry-After": "2"}))
    # a looser inner budget does not extend the outer one
    with (
        h.client.deadline(5.0),
        h.client.deadline(100.0),
        pytest.raises(errors.ServiceUnavailable),
    ):
        await h.client.get_plan("1")
    assert h.sleeps == [2.0, 2.0]
    h.sleeps.clear()
    with pytest.raises(errors.ServiceUnavailable):
        await h.client.get_plan("1")  # outside: the client's own timeout again
    assert h.sleeps == [2.0, 2.0, 2.0]


# -- requests as sent ------------------------------------------------------------------------


async def test_headers_version_auth_and_query(h: Harness) -> None:
    h.mock.get(ANY, payload={"id": "1"})
    h.mock.get(ANY, payload={"total": 0, "plans": []})
    await h.client.get_plan("1")
    await h.client.list_plans(page=2, page_size=5, sort_by="name", sort_order="asc")
    (_, public_url, public), (_, private_url, private) = h.calls()
    assert public["headers"]["Service-Version"] == private["headers"]["Service-Version"] == "1.1"
    assert "Authorization" not in public["headers"]
    assert private["headers"]["Authorization"].startswith("Bearer local:ey")
    assert public["headers"]["Accept"] == "application/json"
    assert public_url == f"{BASE}/protocol/plans/1"
    assert private_url.startswith(f"{BASE}/protocol/plans?")
    query = dict(parse_qsl(private_url.split("?", 1)[1]))
    assert query == {"page": "2", "offset": "5", "sortOrder": "asc", "sortBy": "name"}


async def test_ids_cannot_escape_their_path_segment(h: Harness) -> None:
    h.mock.get(ANY, payload={"id": "x"})
    await h.client.get_plan("../x/y?z")
    assert h.calls()[0][1] == f"{BASE}/protocol/plans/..%2Fx%2Fy%3Fz"


async def test_big_integers_go_out_as_strings(h: Harness) -> None:
    h.mock.post(ANY, payload={"planId": "9"})
    big = 10**30
    plan_id = await h.client.register_plan(
        PlanMetadata(name="p"), crypto_price([big], [ADDRESS]), fixed_credits(2**60, 1)
    )
    assert plan_id == "9"
    (body,) = h.bodies()
    assert body["priceConfig"]["amounts"] == [str(big)]
    assert body["creditsConfig"]["amount"] == str(2**60)
    assert isinstance(body["nonce"], str) and int(body["nonce"]) >= 0


async def test_one_pooled_session_per_client(h: Harness) -> None:
    h.mock.get(ANY, payload={"id": "1"}, repeat=True)
    await h.client.get_plan("1")
    first = h.client.session
    await h.client.get_plan("1")
    assert h.client.session is first and not first.closed
    await h.client.aclose()
    assert first.closed
    await h.client.get_plan("1")  # a closed client reopens lazily rather than failing
    assert h.client.session is not first


# -- answers ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "kind", "hint_word"),
    [
        (400, errors.InvalidRequest, "Fix the request"),
        (401, errors.AuthenticationError, "/svc_login"),
        (402, errors.PaymentRequired, "svc_orderPlan"),
        (403, errors.PermissionDenied, "delegation"),
        (404, errors.NotFound, "svc_listPlans"),
        (409, errors.Conflict, "another plan"),
        (422, errors.InvalidRequest, "Fix the request"),
        (429, errors.RateLimited, "Rate limited"),
        (500, errors.ServiceUnavailable, "retry in a minute"),
        (503, errors.ServiceUnavailable, "retry in a minute"),
    ],
)
async def test_error_mapping_by_status(
    h: Harness, status: int, kind: type[errors.ServiceError], hint_word: str
) -> None:
    h.client.max_retries = 0
    h.mock.post(ANY, status=status, payload={"code": "BCK.T.1", "message": "the reason"})
    with pytest.raises(errors.ServiceError) as info:
        await h.client.order_plan("1")
    assert type(info.value) is kind
    assert info.value.status == status and info.value.code == "BCK.T.1"
    assert info.value.message == "the reason" and str(info.value) == "the reason"
    assert hint_word in info.value.hint


async def test_version_rejection_names_the_version_sent(h: Harness) -> None:
    h.mock.get(ANY, status=400, payload={"code": "BCK.VERSION.0001", "message": "unknown"})
    with pytest.raises(errors.VersionRejected) as info:
        await h.client.get_plan("1")
    assert info.value.version_sent == "1.1" and "1.1" in str(info.value)
    assert "unknown" in str(info.value) and info.value.status == 400
    assert isinstance(info.value, errors.InvalidRequest)


async def test_error_envelope_variants(h: Harness) -> None:
    h.client.max_retries = 0
    answers: list[dict[str, Any]] = [
        {"status": 400, "payload": {"errorCode": "BCK.COMMON.0026", "error": "lost"}},
        {"status": 400, "payload": {"code": "C", "message": "m", "hint": "do X", "details": 7}},
        {"status": 400, "payload": {"code": "C", "message": "m", "details": {"deep": 1}}},
        {"status": 400, "payload": {}, "reason": "Bad Request"},
        {"status": 502, "body": "<html>" + "x" * 500},
        {"status": 503, "body": ""},
    ]
    for answer in answers:
        h.mock.get(ANY, **answer)
    seen = []
    for _ in answers:
        with pytest.raises(errors.ServiceError) as info:
            await h.client.get_plan("1")
        seen.append(info.value)
    assert (seen[0].code, seen[0].message) == ("BCK.COMMON.0026", "lost")
    assert (seen[1].message, seen[1].hint) == ("m (7)", "do X")
    assert seen[2].message == "m" and seen[2].hint == errors.InvalidRequest.default_hint
    assert seen[3].message == "Bad Request" and seen[3].code == "http_400"
    assert seen[4].code == "http_502" and seen[4].message.startswith("HTTP 502: <html>xx")
    assert len(seen[4].message) == len("HTTP 502: ") + 200
    assert seen[5].message.startswith("HTTP 503") and seen[5].code == "http_503"


async def test_a_2xx_that_is_not_json_is_a_protocol_error(h: Harness) -> None:
    h.mock.get(ANY, status=200, body="<html>hello</html>")
    with pytest.raises(errors.ProtocolError) as info:
        await h.client.get_plan("1")
    assert info.value.code == "bad_response" and info.value.status == 200
    h.mock.delete(ANY, status=204, body="")
    assert await h.client.remove_plan_from_agent("a", "p") is False  # empty body reads as {}


async def test_an_answer_of_the_wrong_shape_is_a_protocol_error(h: Harness) -> None:
    h.mock.get(ANY, payload={"balance": "lots"})
    with pytest.raises(errors.ProtocolError) as info:
        await h.client.get_plan_balance("1")
    assert "PlanBalance" in str(info.value) and "balance" in str(info.value)


async def test_no_secret_in_errors_or_repr(mock: aioresponses) -> None:
    key = fake_key(address=ADDRESS)
    client = ServiceClient(BASE, key)
    mock.get(ANY, **fail(401, "BCK.APIKEY.0004"))
    with pytest.raises(errors.AuthenticationError) as info:
        await client.list_plans()
    secret = key.split(":", 1)[1]
    for text in (str(info.value), repr(info.value), repr(client), info.value.hint):
        assert secret not in text
    assert ADDRESS in repr(client) and "/svc_login" in info.value.hint
    await client.aclose()


async def test_no_key_means_not_logged_in_before_any_traffic(mock: aioresponses) -> None:
    client = ServiceClient(BASE)
    with pytest.raises(errors.NotLoggedIn):
        await client.order_plan("1")
    assert mock.requests == {} and repr(client).endswith("account='anonymous')")
    await client.aclose()


async def test_an_expired_key_fails_before_any_traffic(mock: aioresponses) -> None:
    client = ServiceClient(BASE, fake_key(address=ADDRESS, exp=1))
    with pytest.raises(errors.AuthenticationError) as info:
        await client.order_plan("1")
    assert info.value.code == "key_expired" and mock.requests == {}
    await client.aclose()


async def test_order_answer_with_success_false_is_an_error(h: Harness) -> None:
    h.mock.post(ANY, payload={"success": False, "message": "insufficient funds"})
    with pytest.raises(errors.InvalidRequest, match="insufficient funds"):
        await h.client.order_plan("1")


async def test_fiat_checkout_url_read_from_every_field_name(h: Harness) -> None:
    bodies: list[dict[str, Any]] = [
        {"result": {"checkoutLink": "https://pay/1", "stripeCheckoutSessionId": "cs_1"}},
        {"result": {"checkoutUrl": "https://pay/1"}},
        {"checkoutUrl": "https://pay/1", "sessionId": "cs_2"},
        {"checkoutLink": "https://pay/1"},
    ]
    for body in bodies:
        h.mock.post(ANY, payload=body)
    sessions = []
    for _ in bodies:
        checkout = await h.client.order_fiat_plan("1")
        assert checkout.checkout_url == "https://pay/1"
        sessions.append(checkout.session_id)
    assert sessions == ["cs_1", None, "cs_2", None]
    h.mock.post(ANY, payload={"result": {"checkoutLink": "javascript:alert(1)"}})
    with pytest.raises(errors.ProtocolError):
        await h.client.order_fiat_plan("1")


async def test_concurrent_calls_share_the_session(h: Harness) -> None:
    h.mock.get(ANY, payload={"id": "1"}, repeat=True)
    plans = await asyncio.gather(*(h.client.get_plan("1") for _ in range(20)))
    assert {p.id for p in plans} == {"1"} and len(h.calls()) == 20
