"""The service client against the local sandbox over real loopback HTTP, operation by operation."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from svc_gateway.encoding import (
    b64url_nopad,
    compact_json,
    decode_access_token,
    token_authorization,
)
from svc_gateway.sandbox import SandboxServer
from svc_gateway.service import errors
from svc_gateway.service.client import ServiceClient
from svc_gateway.service.models import (
    Accept,
    AgentApi,
    AgentMetadata,
    PaymentRequirement,
    PlanMetadata,
    PriceConfig,
    Resource,
)
from svc_gateway.service.pricing import (
    PriceError,
    dynamic_credits,
    erc20_price,
    expirable_credits,
    fiat_price,
    fixed_credits,
    free_price,
    native_price,
)
from tests.conftest import USDC, make_plan


@pytest.fixture
async def sub_client(sandbox: SandboxServer, subscriber: dict[str, str]):
    client = ServiceClient(sandbox.base_url, subscriber["apiKey"])
    yield client
    await client.aclose()


def envelope(
    plan_id: str, agent_id: str | None = None, scheme: str = "svc:erc4337"
) -> PaymentRequirement:
    extra = {"version": "1", **({"agentId": agent_id} if agent_id else {})}
    return PaymentRequirement(
        resource=Resource(url="/svc/agent"),
        accepts=[Accept(scheme=scheme, network="eip155:84532", plan_id=plan_id, extra=extra)],
    )


async def test_plans_listing_get_and_balance(
    builder_client: ServiceClient, sub_client: ServiceClient, builder: dict[str, str]
) -> None:
    ids = [await make_plan(builder_client, builder["address"], name=f"P{i}") for i in range(3)]
    page = await builder_client.list_plans(page=1, page_size=2, sort_by="name", sort_order="asc")
    assert page.total == 3 and [p.name for p in page.plans] == ["P0", "P1"]
    assert (await sub_client.list_plans()).total == 0  # "my" plans only
    plan = await sub_client.get_plan(ids[0])
    assert plan.is_crypto and plan.registry.credits.amount == 100
    balance = await sub_client.get_plan_balance(ids[0])
    assert balance.balance == 0 and not balance.is_subscriber
    other = await sub_client.get_plan_balance(ids[0], builder["address"])
    assert other.holder_address == builder["address"]


async def test_all_plan_kinds_and_price_helpers(
    builder_client: ServiceClient, builder: dict[str, str]
) -> None:
    me = [builder["address"]]
    meta = PlanMetadata(name="k")
    ids = [
        await builder_client.register_credits_plan(meta, free_price(), fixed_credits(5, 1)),
        await builder_client.register_credits_plan(
            meta, native_price([10**18], me), dynamic_credits(9, 1, 3)
        ),
        await builder_client.register_time_plan(
            meta, erc20_price([5], me, USDC), expirable_credits(60)
        ),
        await builder_client.register_credits_trial_plan(
            meta, fiat_price([1_000_000], me), fixed_credits(2, 1)
        ),
        await builder_client.register_time_trial_plan(meta, free_price(), expirable_credits(60)),
    ]
    plans = [await builder_client.get_plan(i) for i in ids]
    assert [p.is_time_plan for p in plans] == [False, False, True, False, True]
    assert [p.is_trial for p in plans] == [False, False, False, True, True]
    assert plans[3].is_crypto is False and plans[3].scheme == "svc:card-delegation"
    assert plans[1].registry.price.amounts == [10**18]
    with pytest.raises(PriceError):  # refused locally before any request
        fiat_price([500_000], me)
    too_low = PriceConfig(is_crypto=False, amounts=[500_000], receivers=me, currency="usd")
    with pytest.raises(errors.InvalidRequest) as info:  # and by the service
        await builder_client.register_plan(meta, too_low, fixed_credits(1))
    assert info.value.code == "BCK.PROTOCOL.0047"


async def test_orders_fiat_checkout_and_minting(
    builder_client: ServiceClient,
    sub_client: ServiceClient,
    builder: dict[str, str],
    subscriber: dict[str, str],
) -> None:
    crypto = await make_plan(builder_client, builder["address"])
    fiat = await make_plan(builder_client, builder["address"], fiat=True, credits=7)
    assert (await sub_client.order_plan(crypto)).tx_hash
    checkout = await sub_client.order_fiat_plan(fiat)
    async with httpx.AsyncClient() as http:
        await http.get(checkout.checkout_url)
        await http.get(checkout.checkout_url)  # opening twice grants once
    assert (await sub_client.get_plan_balance(fiat)).balance == 7
    await builder_client.mint_credits(crypto, 11, subscriber["address"])
    assert (await sub_client.get_plan_balance(crypto)).balance == 111
    with pytest.raises(errors.PermissionDenied):
        await sub_client.mint_credits(crypto, 1, subscriber["address"])


async def test_agents_and_associations(
    builder_client: ServiceClient, sub_client: ServiceClient, builder: dict[str, str]
) -> None:
    plan_a = await make_plan(builder_client, builder["address"])
    agent_id = await builder_client.register_agent(
        AgentMetadata(name="A"), AgentApi(endpoints=[{"POST": "http://127.0.0.1:9/a"}]), [plan_a]
    )
    ids = await builder_client.register_agent_and_plan(
        AgentMetadata(name="B"),
        AgentApi(),
        PlanMetadata(name="B plan"),
        free_price(),
        fixed_credits(3),
    )
    assert ids.agent_id and ids.plan_id
    agent = await sub_client.get_agent(agent_id)
    assert agent.name == "A" and agent.registry.plans == [plan_a]
    assert (await builder_client.list_agents()).total == 2
    assert [a.id for a in (await sub_client.get_plan_agents(plan_a)).agents] == [agent_id]
    assert [p.id for p in (await sub_client.get_agent_plans(agent_id)).plans] == [plan_a]
    with pytest.raises(errors.PermissionDenied):
        await sub_client.remove_plan_from_agent(agent_id, plan_a)
    assert await builder_client.remove_plan_from_agent(agent_id, plan_a) is True
    with pytest.raises(errors.NotFound) as info:
        await builder_client.remove_plan_from_agent(agent_id, plan_a)
    assert info.value.status == 404
    anonymous = ServiceClient(builder_client.base_url)
    with pytest.raises(errors.NotLoggedIn):
        await anonymous.remove_plan_from_agent(agent_id, plan_a)
    await anonymous.aclose()


async def test_delegations_payment_methods_and_tokens(
    builder_client: ServiceClient,
    sub_client: ServiceClient,
    builder: dict[str, str],
    subscriber: dict[str, str],
) -> None:
    plan = await make_plan(builder_client, builder["address"])
    cards = [m for m in await sub_client.list_payment_methods() if m.is_card]
    assert [c.last4 for c in cards] == ["4242", "1111"]  # Stripe and Braintree test cards
    delegation = await sub_client.create_delegation("erc4337", 10000, 3600, "usdc")
    token = await sub_client.create_access_token(plan, delegation.delegation_id)
    decoded = decode_access_token(token)
    assert decoded and token_authorization(decoded)["from"] == subscriber["address"]
    assert sub_client.decode_access_token("garbage") is None
    with pytest.raises(errors.InvalidRequest):
        await sub_client.create_delegation("erc4337", 10000, 3600, "usd")


async def test_versions_and_version_errors(
    sandbox: SandboxServer, subscriber: dict[str, str]
) -> None:
    client = ServiceClient(sandbox.base_url, subscriber["apiKey"])
    info = await client.get_versions()
    assert info.current == "1.1" and info.floor == "1.0"
    assert info.your_version_resolved_from == "header" and info.your_effective_version == "1.1"
    await client.aclose()
    bad = ServiceClient(sandbox.base_url, subscriber["apiKey"], api_version="9.9")
    with pytest.raises(errors.VersionRejected) as rejected:
        await bad.list_plans()
    assert rejected.value.code == "BCK.VERSION.0001" and rejected.value.version_sent == "9.9"
    assert "9.9" in str(rejected.value)
    await bad.aclose()


async def test_unknown_key_is_401_with_service_code(sandbox: SandboxServer) -> None:
    from tests.helpers import fake_key

    client = ServiceClient(sandbox.base_url, fake_key())
    with pytest.raises(errors.AuthenticationError) as info:
        await client.list_plans()
    assert info.value.status == 401 and info.value.code == "BCK.APIKEY.0004"
    with pytest.raises(errors.NotFound) as missing:
        await client.get_plan("123456789")
    assert missing.value.status == 404
    await client.aclose()


async def test_verify_is_free_and_settle_replayed_50_times_burns_once(
    builder_client: ServiceClient, sub_client: ServiceClient, builder: dict[str, str]
) -> None:
    plan = await make_plan(builder_client, builder["address"], per_request=2)
    await sub_client.order_plan(plan)
    token = await sub_client.get_access_token(plan)
    env = envelope(plan)
    verdict = await builder_client.verify(env, token, 2)
    assert verdict.is_valid and verdict.request_id
    assert (await sub_client.get_plan_balance(plan)).balance == 100  # verify burns nothing
    results = await asyncio.gather(
        *(builder_client.settle(env, token, 2, verdict.request_id) for _ in range(50))
    )
    assert all(r.success for r in results)
    assert len({r.transaction for r in results}) == 1
    assert (await sub_client.get_plan_balance(plan)).balance == 98


async def test_credits_are_conserved_after_a_mixed_run(
    builder_client: ServiceClient,
    sub_client: ServiceClient,
    builder: dict[str, str],
    subscriber: dict[str, str],
) -> None:
    plan = await make_plan(builder_client, builder["address"], credits=10, per_request=1)
    await sub_client.order_plan(plan)
    await builder_client.mint_credits(plan, 5, subscriber["address"])
    granted = 15
    assert (await sub_client.get_plan_balance(plan)).balance == granted
    token = await sub_client.get_access_token(plan)
    env = envelope(plan)
    verdicts = await asyncio.gather(*(builder_client.verify(env, token, 1) for _ in range(20)))
    assert all(v.is_valid for v in verdicts)  # verify is a dry run: it reserves nothing
    assert (await sub_client.get_plan_balance(plan)).balance == granted
    burned = refused = 0
    for i, verdict in enumerate(verdicts):
        if i % 5 == 0:
            continue  # work failed: never settled, no charge
        result = await builder_client.settle(env, token, 1, verdict.request_id)
        if not result.success:
            assert "insufficient" in (result.error_reason or "")
            refused += 1  # the balance ran out since verify: settle re-checks it
            continue
        burned += int(result.credits_redeemed or 0)
    balance = (await sub_client.get_plan_balance(plan)).balance
    # 16 settles for 15 credits: the 16th tops up through the token's delegation (one order
    # of 10 credits, counted as a grant), as the service does (SettleResponse.orderTx)
    assert (balance, burned, refused) == (9, 16, 0)
    assert granted + 10 == balance + burned


async def test_tampered_token_fails_verify(
    builder_client: ServiceClient,
    sub_client: ServiceClient,
    builder: dict[str, str],
    subscriber: dict[str, str],
) -> None:
    plan = await make_plan(builder_client, builder["address"])
    await sub_client.order_plan(plan)
    token = await sub_client.get_access_token(plan)
    decoded = decode_access_token(token)
    assert decoded is not None and token_authorization(decoded)["from"] == subscriber["address"]
    assert (await builder_client.verify(envelope(plan), token, 1)).is_valid
    decoded["payload"]["authorization"]["from"] = builder["address"]  # spend someone else's
    forged = b64url_nopad(compact_json(decoded).encode())
    verdict = await builder_client.verify(envelope(plan), forged, 1)
    assert not verdict.is_valid and verdict.invalid_reason


async def test_verify_and_settle_without_max_amount_use_the_plans_default(
    builder_client: ServiceClient, sub_client: ServiceClient, builder: dict[str, str]
) -> None:
    plan = await make_plan(builder_client, builder["address"], per_request=2)
    await sub_client.order_plan(plan)
    token = await sub_client.get_access_token(plan)
    verdict = await builder_client.verify(envelope(plan), token)
    assert verdict.is_valid
    settled = await builder_client.settle(envelope(plan), token, None, verdict.request_id)
    assert settled.success and settled.credits_redeemed == 2
    assert (await sub_client.get_plan_balance(plan)).balance == 98


async def test_a_fiat_plan_goes_out_in_iso_upper_case_and_reads_back(
    builder_client: ServiceClient, builder: dict[str, str]
) -> None:
    price = fiat_price([2_000_000], [builder["address"]], currency="usd")
    assert price.wire()["currency"] == "USD"
    plan_id = await builder_client.register_plan(PlanMetadata(name="Card"), price, fixed_credits(3))
    plan = await builder_client.get_plan(plan_id)
    assert plan.scheme == "svc:card-delegation" and plan.registry.price.amounts == [2_000_000]
