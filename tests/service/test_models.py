"""Wire models read what the service (and the SDK) may send, and write what the SDK writes."""

from __future__ import annotations

import pytest

from svc_gateway.service import errors
from svc_gateway.service.client import ServiceClient
from svc_gateway.service.models import (
    Accept,
    AgentApi,
    PaymentMethod,
    PaymentRequirement,
    Plan,
    PlanMetadata,
    PlanPage,
    PriceConfig,
    Resource,
)
from tests.helpers import fake_key
from tests.service.mocking import aioresponses

ADDRESS = "0x" + "ab" * 20


def test_a_plan_item_with_only_plan_id_is_a_plan() -> None:
    page = PlanPage.model_validate({"plans": [{"planId": "7"}, {"id": "8"}], "total": 2})
    assert [p.id for p in page.plans] == ["7", "8"]
    assert Plan.model_validate({"planId": "7"}).name == "7"
    assert Plan.model_validate({}).id == ""


def test_a_non_card_payment_method_reads_without_type_or_expiry() -> None:
    method = PaymentMethod.model_validate(
        {"id": "pm-1", "type": None, "expMonth": None, "provider": "erc4337"}
    )
    assert not method.is_card and method.expiry is None and method.brand is None
    card = PaymentMethod.model_validate({"id": "c", "type": "card", "expMonth": 3, "expYear": 2031})
    assert card.is_card and card.expiry == "03/2031"


@pytest.mark.parametrize(("given", "sent"), [("usd", "USD"), (" eur ", "EUR"), (None, None)])
def test_price_currency_goes_out_upper_case(given: str | None, sent: str | None) -> None:
    price = PriceConfig(is_crypto=False, amounts=[1_000_000], receivers=[ADDRESS], currency=given)
    assert price.wire().get("currency") == sent


def test_plan_metadata_always_says_whether_it_is_a_trial() -> None:
    assert PlanMetadata(name="p").wire() == {"name": "p", "isTrialPlan": False}
    assert PlanMetadata(name="p", is_trial_plan=None).wire()["isTrialPlan"] is False
    assert PlanMetadata(name="p", is_trial_plan=True).wire()["isTrialPlan"] is True


def test_agent_api_sends_endpoints_only_when_given() -> None:
    assert "endpoints" not in AgentApi().wire()
    assert AgentApi(endpoints=[{"POST": "https://a/x"}]).wire()["endpoints"] == [
        {"POST": "https://a/x"}
    ]


def test_the_envelope_sends_optional_fields_as_null_like_the_sdk() -> None:
    envelope = PaymentRequirement(
        resource=Resource(url="https://a/x"),
        accepts=[Accept(scheme="svc:erc4337", network="eip155:84532", plan_id="1")],
    )
    assert envelope.wire() == {
        "x402Version": 2,
        "error": None,
        "resource": {"url": "https://a/x", "description": None, "mimeType": None},
        "accepts": [
            {
                "scheme": "svc:erc4337",
                "network": "eip155:84532",
                "planId": "1",
                "extra": {"version": "1", "agentId": None, "httpVerb": None},
            }
        ],
        "extensions": {},
    }


async def test_an_order_limit_is_refused_before_anything_is_sent() -> None:
    from svc_gateway.service.pricing import fixed_credits, free_price

    client = ServiceClient("http://127.0.0.1:9/api/v1", fake_key(address=ADDRESS))
    with aioresponses() as mock:
        with pytest.raises(errors.InvalidRequest) as info:
            await client.register_plan(
                PlanMetadata(name="p"), free_price(), fixed_credits(1), max_orders=3
            )
        assert mock.requests == {}
    assert info.value.code == "order_limit_unsupported" and "ignored" in info.value.message
    await client.aclose()


@pytest.mark.parametrize(("amount", "sent"), [(7, 7), (2**53 - 1, 2**53 - 1), (2**53, str(2**53))])
async def test_mint_uses_the_sdks_route_and_body(amount: int, sent: int | str) -> None:
    import json

    client = ServiceClient("http://127.0.0.1:9/api/v1", fake_key(address=ADDRESS))
    with aioresponses() as mock:
        mock.post("http://127.0.0.1:9/api/v1/protocol/plans/mint", payload={"success": True})
        assert await client.mint_credits("12", amount, ADDRESS) == {"success": True}
        (call,) = [c for calls in mock.requests.values() for c in calls]
    assert json.loads(call.kwargs["data"]) == {
        "planId": "12",
        "amount": sent,
        "creditsReceiver": ADDRESS,
    }
    await client.aclose()


@pytest.mark.parametrize(
    ("prefix", "environment", "deployment"),
    [
        ("sandbox", "sandbox", None),
        ("live", "live", None),
        ("local", "local", None),
        ("SANDBOX-STAGING", "sandbox", "staging"),
        ("live-staging", "live", "staging"),
        ("moon", None, None),
        ("sandbox-dev", None, None),
    ],
)
def test_key_prefixes_the_sdk_knows(
    prefix: str, environment: str | None, deployment: str | None
) -> None:
    from svc_gateway.api_keys import parse_api_key

    key = parse_api_key(fake_key(env=prefix, address=ADDRESS))
    assert (key.environment, key.deployment, key.address) == (environment, deployment, ADDRESS)
    assert key.secret.get_secret_value().startswith(prefix + ":")


@pytest.mark.parametrize(
    ("token", "max_amount", "request_id"),
    [
        ("eyJhbGciOi.x.y", 3, None),
        ("tok+/=", None, "req-1"),
        ("t", 2**70, 'ré"q\\'),  # escapes, non-ASCII, a big amount
    ],
)
def test_a_facilitator_body_is_byte_for_byte_the_json_of_its_fields(
    token: str, max_amount: int | None, request_id: str | None
) -> None:
    import json

    from svc_gateway.encoding import facilitator_body

    envelope = PaymentRequirement(
        resource=Resource(url="https://a.example/agent", description="ünïcode"),
        accepts=[Accept(scheme="svc:erc4337", network="eip155:84532", plan_id="7")],
    )
    body: dict[str, object] = {"paymentRequired": envelope.wire(), "x402AccessToken": token}
    if max_amount is not None:
        body["maxAmount"] = str(max_amount)
    if request_id:
        body["agentRequestId"] = request_id
    expected = json.dumps(body, separators=(",", ":")).encode()
    got = facilitator_body(envelope.wire_json(), token, max_amount, request_id)
    assert got == expected
