"""Our ``ServiceClient`` sends what the official ``payments-py`` SDK sends (issue 8).

A recording reverse proxy on 127.0.0.1 sits in front of the local sandbox. For each operation
both clients offer, the SDK and our client perform it against the proxy, and the requests are
compared: method, path, query, the headers that carry meaning (Accept, Content-Type, version,
Authorization, org id) and the JSON body. Before comparing, brand strings are normalised
(``nvm:*`` → ``svc:*``, ``Nevermined-Version`` → ``Service-Version``, done by a shim on the SDK's
HTTP adapter that also lets the sandbox understand it) and so are volatile values (nonces).
A request is recorded even when the sandbox answers 4xx, so a missing route cannot hide a
difference. Where the SDK disagrees with WIRE.md, the SDK wins (see the notes by each case).
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import hashlib
import json
import threading
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlsplit

import pytest

payments_py = pytest.importorskip("payments_py", reason="the test extra installs payments-py")

import requests  # noqa: E402
import requests.adapters  # noqa: E402
from payments_py import PaymentOptions, Payments  # noqa: E402
from payments_py import environments as sdk_environments  # noqa: E402
from payments_py import plans as sdk_plans  # noqa: E402
from payments_py.common.types import (  # noqa: E402
    AgentAPIAttributes,
    PaginationOptions,
)
from payments_py.common.types import AgentMetadata as SdkAgentMetadata  # noqa: E402
from payments_py.common.types import PlanMetadata as SdkPlanMetadata  # noqa: E402
from payments_py.x402.types import (  # noqa: E402
    CreateDelegationPayload,
    DelegationConfig,
    X402PaymentRequired,
    X402TokenOptions,
)

from svc_gateway.sandbox import SandboxServer, start_sandbox  # noqa: E402
from svc_gateway.service import errors  # noqa: E402
from svc_gateway.service.client import ServiceClient  # noqa: E402
from svc_gateway.service.models import (  # noqa: E402
    Accept,
    AgentApi,
    AgentMetadata,
    PaymentRequirement,
    PlanMetadata,
    Resource,
)
from svc_gateway.service.pricing import (  # noqa: E402
    dynamic_credits,
    erc20_price,
    expirable_credits,
    fiat_price,
    fixed_credits,
    free_price,
    native_price,
)
from tests.service.proxy import FaultProxy, Recorded, start_proxy  # noqa: E402

T = TypeVar("T")
USDC = "0x036CbD53842c5426634e7929541eC2318f3dCF7e"
AGENT_URL = "http://127.0.0.1:9/agent"
COMPARED_HEADERS = (
    "accept",
    "content-type",
    "service-version",
    "authorization",
    "x-current-org-id",
)
SCHEMES = ("erc4337", "card-delegation")


class LoopThread:
    """The sandbox, the proxy and our (async) client live on this loop; the SDK is sync."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


def _rebrand(value: Any, old: str, new: str) -> Any:
    if isinstance(value, str):
        return new + value[len(old) :] if value in {old + s for s in SCHEMES} else value
    if isinstance(value, dict):
        return {k: _rebrand(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [_rebrand(v, old, new) for v in value]
    return value


def _install_brand_shim(mp: pytest.MonkeyPatch) -> None:
    """Translate the SDK's brand strings, and nothing else, in both directions."""
    original = requests.adapters.HTTPAdapter.send

    def send(
        self: requests.adapters.HTTPAdapter, request: requests.PreparedRequest, **kwargs: Any
    ) -> requests.Response:
        if urlsplit(request.url or "").hostname != "127.0.0.1":
            raise requests.ConnectionError("this test reaches 127.0.0.1 only")
        version = request.headers.pop("Nevermined-Version", None)
        if version is not None:
            request.headers["Service-Version"] = version
        if request.body:
            raw = request.body.decode() if isinstance(request.body, bytes) else request.body
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
            if isinstance(body, dict | list):
                request.body = json.dumps(_rebrand(body, "nvm:", "svc:")).encode()
                request.headers["Content-Length"] = str(len(request.body))
        response = original(self, request, **kwargs)
        if response.content:
            try:
                answer = json.loads(response.content)
            except ValueError:
                return response
            response._content = json.dumps(_rebrand(answer, "svc:", "nvm:")).encode()
        return response

    mp.setattr(requests.adapters.HTTPAdapter, "send", send)


@dataclass
class World:
    loop: LoopThread
    sandbox: SandboxServer
    proxy: FaultProxy
    sdk_builder: Payments
    sdk_subscriber: Payments
    builder: ServiceClient
    subscriber: ServiceClient
    builder_address: str
    subscriber_address: str
    plan_id: str = ""
    fiat_plan_id: str = ""
    agent_id: str = ""
    delegation_id: str = ""
    token: str = ""


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    loop = LoopThread()
    with pytest.MonkeyPatch.context() as mp:
        sandbox = loop.run(start_sandbox("127.0.0.1", 0))
        proxy = loop.run(start_proxy(sandbox.base_url))
        try:
            builder = loop.run(sandbox.create_account("builder"))
            subscriber = loop.run(sandbox.create_account("subscriber"))
            mp.setitem(
                sdk_environments.Environments,
                "custom",
                sdk_environments.EnvironmentInfo(
                    frontend=proxy.origin,
                    backend=proxy.origin,
                    proxy=proxy.origin,
                    helicone_url=proxy.origin,
                ),
            )
            _install_brand_shim(mp)
            base = proxy.url(sandbox.base_url)
            w = World(
                loop=loop,
                sandbox=sandbox,
                proxy=proxy,
                sdk_builder=Payments.get_instance(PaymentOptions(nvm_api_key=builder["apiKey"])),
                sdk_subscriber=Payments.get_instance(
                    PaymentOptions(nvm_api_key=subscriber["apiKey"])
                ),
                builder=ServiceClient(base, builder["apiKey"]),
                subscriber=ServiceClient(base, subscriber["apiKey"]),
                builder_address=builder["address"],
                subscriber_address=subscriber["address"],
            )
            loop.run(_prepare(w))
            yield w
        finally:
            for client in ("builder", "subscriber"):
                if "w" in locals():
                    loop.run(getattr(w, client).aclose())
            loop.run(proxy.close())
            loop.run(sandbox.close())
            loop.stop()


async def _prepare(w: World) -> None:
    """A plan, a fiat plan, an agent selling the plan, a subscription, a delegation, a token."""
    me = [w.builder_address]
    w.plan_id = await w.builder.register_credits_plan(
        PlanMetadata(name="Wire"), erc20_price([1_000_000], me, USDC), fixed_credits(1000, 1)
    )
    w.fiat_plan_id = await w.builder.register_credits_plan(
        PlanMetadata(name="Wire fiat"), fiat_price([2_000_000], me), fixed_credits(10, 1)
    )
    w.agent_id = await w.builder.register_agent(
        AgentMetadata(name="Wire agent"), AgentApi(endpoints=[{"POST": AGENT_URL}]), [w.plan_id]
    )
    await w.subscriber.order_plan(w.plan_id)
    delegation = await w.subscriber.create_delegation("erc4337", 10_000, 3600, "usdc")
    w.delegation_id = delegation.delegation_id
    w.token = await w.subscriber.create_access_token(
        w.plan_id, w.delegation_id, agent_id=w.agent_id
    )


# -- comparing ------------------------------------------------------------------------------


def normal(item: Recorded) -> dict[str, Any]:
    """What must be equal: brand strings and nonces normalised, transport headers dropped."""
    headers = {k.lower(): v for k, v in item.headers.items()}
    if "authorization" in headers:  # the same key on both sides; never print it
        digest = hashlib.sha256(headers["authorization"].encode()).hexdigest()[:12]
        headers["authorization"] = f"Bearer <key {digest}>"
    body = item.json() if item.body else None
    if isinstance(body, dict) and "nonce" in body:
        body = {**body, "nonce": "<nonce>"}
    return {
        "method": item.method,
        "path": item.path,
        "query": sorted(parse_qsl(item.query, keep_blank_values=True)),
        "headers": {k: headers.get(k) for k in COMPARED_HEADERS},
        "body": body,
    }


def exchange(w: World, sdk: Callable[[], object], ours: Callable[[], Coroutine[Any, Any, Any]]):
    """Run the SDK's call, then ours; return both request lists in normal form."""
    w.proxy.clear()
    with contextlib.suppress(Exception):  # the request is compared, not the sandbox's answer
        sdk()
    sdk_sent = [normal(r) for r in w.proxy.recorded]
    w.proxy.clear()
    with contextlib.suppress(errors.ServiceError):
        w.loop.run(ours())
    ours_sent = [normal(r) for r in w.proxy.recorded]
    assert sdk_sent, "the SDK sent nothing"
    return Sent(sdk_sent), Sent(ours_sent)


class Sent(list[dict[str, Any]]):
    """Requests in normal form."""


def same(ours: Sent, sdk: Sent) -> None:
    """Equal, or fail with a line diff of the two JSON renderings."""
    if ours == sdk:
        return
    a = json.dumps(ours, indent=1, sort_keys=True).splitlines()
    b = json.dumps(sdk, indent=1, sort_keys=True).splitlines()
    diff = "\n".join(difflib.unified_diff(a, b, "ours", "sdk", lineterm="", n=2))
    raise AssertionError(f"our request differs from the SDK's:\n{diff}")


def envelope_dict(w: World) -> dict[str, Any]:
    return {
        "x402Version": 2,
        "resource": {"url": AGENT_URL, "description": "wire", "mimeType": "application/json"},
        "accepts": [
            {
                "scheme": "nvm:erc4337",
                "network": "eip155:84532",
                "planId": w.plan_id,
                "extra": {"version": "1", "agentId": w.agent_id, "httpVerb": "POST"},
            }
        ],
        "extensions": {},
    }


def our_envelope(w: World) -> PaymentRequirement:
    """The envelope as our seller builds it: with x402's price terms (``amount``, ``asset``,
    ``payTo``, ``maxTimeoutSeconds``), which buyers see but verify and settle never carry (the
    SDK does not send them: the request bodies below must still be the SDK's, byte for byte)."""
    data = envelope_dict(w)
    accept = data["accepts"][0]
    return PaymentRequirement(
        resource=Resource(url=AGENT_URL, description="wire", mime_type="application/json"),
        accepts=[
            Accept(
                scheme="svc:erc4337",
                network=accept["network"],
                plan_id=accept["planId"],
                extra=accept["extra"],
                amount=1,
                asset=f"{accept['network']}/svc:{accept['planId']}",
                pay_to="0x" + "1" * 40,
                max_timeout_seconds=90,
            )
        ],
    )


def sdk_envelope(w: World) -> X402PaymentRequired:
    return X402PaymentRequired.model_validate(envelope_dict(w))


# -- the operations -------------------------------------------------------------------------


def test_get_plan(world: World) -> None:
    w = world
    sdk, ours = exchange(
        w,
        lambda: w.sdk_subscriber.plans.get_plan(w.plan_id),
        lambda: w.subscriber.get_plan(w.plan_id),
    )
    same(ours, sdk)


def test_balance(world: World) -> None:
    w = world
    sdk, ours = exchange(
        w,
        lambda: w.sdk_subscriber.plans.get_plan_balance(w.plan_id),
        lambda: w.subscriber.get_plan_balance(w.plan_id),
    )
    same(ours, sdk)


def test_list_plans(world: World) -> None:
    w = world
    sdk, ours = exchange(
        w, lambda: w.sdk_builder.plans.get_user_plans(), lambda: w.builder.list_plans()
    )
    same(ours, sdk)
    sdk, ours = exchange(
        w,
        lambda: w.sdk_builder.plans.get_user_plans(
            pagination=PaginationOptions(page=2, offset=5, sort_by="name", sort_order="asc")
        ),
        lambda: w.builder.list_plans(page=2, page_size=5, sort_by="name", sort_order="asc"),
    )
    same(ours, sdk)


def test_order(world: World) -> None:
    w = world
    sdk, ours = exchange(
        w,
        lambda: w.sdk_subscriber.plans.order_plan(w.plan_id),
        lambda: w.subscriber.order_plan(w.plan_id),
    )
    same(ours, sdk)


def test_fiat_order(world: World) -> None:
    w = world
    sdk, ours = exchange(
        w,
        lambda: w.sdk_subscriber.plans.order_fiat_plan(w.fiat_plan_id),
        lambda: w.subscriber.order_fiat_plan(w.fiat_plan_id),
    )
    same(ours, sdk)


PLAN_KINDS = ["credits", "dynamic", "time", "credits_trial", "time_trial", "fiat", "native", "free"]


@pytest.mark.parametrize("kind", PLAN_KINDS)
def test_register_plan_of_each_kind(world: World, kind: str) -> None:
    w = world
    me = w.builder_address
    name = f"Kind {kind}"
    sdk_api = w.sdk_builder.plans
    sdk_meta = SdkPlanMetadata(name=name, description="d", tags=["t"])
    ours_meta = PlanMetadata(name=name, description="d", tags=["t"])
    sdk_calls: dict[str, Callable[[], object]] = {
        "credits": lambda: sdk_api.register_credits_plan(
            sdk_meta,
            sdk_plans.get_erc20_price_config(1_000_000, USDC, me),
            sdk_plans.get_fixed_credits_config(100, 2),
        ),
        "dynamic": lambda: sdk_api.register_credits_plan(
            sdk_meta,
            sdk_plans.get_erc20_price_config(1_000_000, USDC, me),
            sdk_plans.get_dynamic_credits_config(100, 1, 5),
        ),
        "time": lambda: sdk_api.register_time_plan(
            sdk_meta,
            sdk_plans.get_erc20_price_config(1_000_000, USDC, me),
            sdk_plans.get_expirable_duration_config(86_400),
        ),
        "credits_trial": lambda: sdk_api.register_credits_trial_plan(
            sdk_meta, sdk_plans.get_free_price_config(), sdk_plans.get_fixed_credits_config(5, 1)
        ),
        "time_trial": lambda: sdk_api.register_time_trial_plan(
            sdk_meta,
            sdk_plans.get_free_price_config(),
            sdk_plans.get_expirable_duration_config(3600),
        ),
        "fiat": lambda: sdk_api.register_credits_plan(
            sdk_meta,
            sdk_plans.get_fiat_price_config(2_000_000, me),
            sdk_plans.get_fixed_credits_config(10, 1),
        ),
        "native": lambda: sdk_api.register_credits_plan(
            sdk_meta,
            sdk_plans.get_native_token_price_config(10**15, me),
            sdk_plans.get_fixed_credits_config(10, 1),
        ),
        "free": lambda: sdk_api.register_credits_plan(
            sdk_meta, sdk_plans.get_free_price_config(), sdk_plans.get_fixed_credits_config(3, 1)
        ),
    }
    c = w.builder
    ours_calls: dict[str, Callable[[], Coroutine[Any, Any, Any]]] = {
        "credits": lambda: c.register_credits_plan(
            ours_meta, erc20_price([1_000_000], [me], USDC), fixed_credits(100, 2)
        ),
        "dynamic": lambda: c.register_credits_plan(
            ours_meta, erc20_price([1_000_000], [me], USDC), dynamic_credits(100, 1, 5)
        ),
        "time": lambda: c.register_time_plan(
            ours_meta, erc20_price([1_000_000], [me], USDC), expirable_credits(86_400)
        ),
        "credits_trial": lambda: c.register_credits_trial_plan(
            ours_meta, free_price(), fixed_credits(5, 1)
        ),
        "time_trial": lambda: c.register_time_trial_plan(
            ours_meta, free_price(), expirable_credits(3600)
        ),
        "fiat": lambda: c.register_credits_plan(
            ours_meta, fiat_price([2_000_000], [me]), fixed_credits(10, 1)
        ),
        "native": lambda: c.register_credits_plan(
            ours_meta, native_price([10**15], [me]), fixed_credits(10, 1)
        ),
        "free": lambda: c.register_credits_plan(ours_meta, free_price(), fixed_credits(3, 1)),
    }
    sdk, ours = exchange(w, sdk_calls[kind], ours_calls[kind])
    same(ours, sdk)


def test_register_agent(world: World) -> None:
    w = world
    sdk, ours = exchange(
        w,
        lambda: w.sdk_builder.agents.register_agent(
            SdkAgentMetadata(name="A", description="d", tags=["x"], author="me"),
            AgentAPIAttributes(open_endpoints=["http://127.0.0.1:9/open"]),
            [w.plan_id],
        ),
        lambda: w.builder.register_agent(
            AgentMetadata(name="A", description="d", tags=["x"], author="me"),
            AgentApi(open_endpoints=["http://127.0.0.1:9/open"]),
            [w.plan_id],
        ),
    )
    same(ours, sdk)


def test_agent_endpoints_keep_the_services_shape_not_the_sdks_known_bug(world: World) -> None:
    """The one place we do not follow the SDK: its ``Endpoint`` model serialises
    ``{"verb", "url"}``, which its own docstring says the service never matches
    (``BCK.PROTOCOL.0031``, payments-py#274). We send ``{"POST": url}``, the service's shape."""
    w = world
    sdk, ours = exchange(
        w,
        lambda: w.sdk_builder.agents.register_agent(
            SdkAgentMetadata(name="E"),
            AgentAPIAttributes(endpoints=[{"verb": "POST", "url": AGENT_URL}]),
            [w.plan_id],
        ),
        lambda: w.builder.register_agent(
            AgentMetadata(name="E"), AgentApi(endpoints=[{"POST": AGENT_URL}]), [w.plan_id]
        ),
    )
    assert sdk[0]["body"]["agentApiAttributes"]["endpoints"] == [{"verb": "POST", "url": AGENT_URL}]
    assert ours[0]["body"]["agentApiAttributes"]["endpoints"] == [{"POST": AGENT_URL}]
    for request in (sdk[0], ours[0]):
        request["body"]["agentApiAttributes"].pop("endpoints")
    same(ours, sdk)


def test_register_agent_and_plan(world: World) -> None:
    w = world
    me = w.builder_address
    sdk, ours = exchange(
        w,
        lambda: w.sdk_builder.agents.register_agent_and_plan(
            SdkAgentMetadata(name="AP"),
            AgentAPIAttributes(),
            SdkPlanMetadata(name="AP plan"),
            sdk_plans.get_erc20_price_config(1_000_000, USDC, me),
            sdk_plans.get_fixed_credits_config(10, 1),
        ),
        lambda: w.builder.register_agent_and_plan(
            AgentMetadata(name="AP"),
            AgentApi(),
            PlanMetadata(name="AP plan"),
            erc20_price([1_000_000], [me], USDC),
            fixed_credits(10, 1),
        ),
    )
    same(ours, sdk)


def test_delegation_create(world: World) -> None:
    w = world
    sdk, ours = exchange(
        w,
        lambda: w.sdk_subscriber.delegation.create_delegation(
            CreateDelegationPayload(
                provider="erc4337", spending_limit_cents=5000, duration_secs=600, currency="usdc"
            )
        ),
        lambda: w.subscriber.create_delegation("erc4337", 5000, 600, "usdc"),
    )
    same(ours, sdk)


def test_payment_methods(world: World) -> None:
    w = world
    sdk, ours = exchange(
        w,
        lambda: w.sdk_subscriber.delegation.list_payment_methods(),
        lambda: w.subscriber.list_payment_methods(),
    )
    same(ours, sdk)
    sdk, ours = exchange(
        w,
        lambda: w.sdk_subscriber.delegation.list_payment_methods("stripe"),
        lambda: w.subscriber.list_payment_methods("stripe"),
    )
    same(ours, sdk)


def test_token_request(world: World) -> None:
    w = world
    sdk, ours = exchange(
        w,
        lambda: w.sdk_subscriber.x402.get_x402_access_token(
            w.plan_id,
            w.agent_id,
            token_options=X402TokenOptions(
                delegation_config=DelegationConfig(delegation_id=w.delegation_id)
            ),
        ),
        lambda: w.subscriber.create_access_token(w.plan_id, w.delegation_id, agent_id=w.agent_id),
    )
    same(ours, sdk)


@pytest.mark.parametrize("max_amount", [1, None])
def test_verify(world: World, max_amount: int | None) -> None:
    w = world
    sdk, ours = exchange(
        w,
        lambda: w.sdk_builder.facilitator.verify_permissions(
            sdk_envelope(w), w.token, None if max_amount is None else str(max_amount)
        ),
        lambda: w.builder.verify(our_envelope(w), w.token, max_amount),
    )
    same(ours, sdk)


def test_settle(world: World) -> None:
    w = world
    sdk, ours = exchange(
        w,
        lambda: w.sdk_builder.facilitator.settle_permissions(
            sdk_envelope(w), w.token, "1", agent_request_id="req-wire-1"
        ),
        lambda: w.builder.settle(our_envelope(w), w.token, 1, "req-wire-1"),
    )
    same(ours, sdk)


def test_mint(world: World) -> None:
    w = world
    sdk, ours = exchange(
        w,
        lambda: w.sdk_builder.plans.mint_plan_credits(w.plan_id, 7, w.subscriber_address),
        lambda: w.builder.mint_credits(w.plan_id, 7, w.subscriber_address),
    )
    same(ours, sdk)


def test_remove_plan_from_agent(world: World) -> None:
    w = world
    sdk, ours = exchange(
        w,
        lambda: w.sdk_builder.agents.remove_plan_from_agent(w.plan_id, w.agent_id),
        lambda: w.builder.remove_plan_from_agent(w.agent_id, w.plan_id),
    )
    same(ours, sdk)


def test_agent_reads(world: World) -> None:
    w = world
    sdk, ours = exchange(
        w,
        lambda: w.sdk_subscriber.agents.get_agent(w.agent_id),
        lambda: w.subscriber.get_agent(w.agent_id),
    )
    same(ours, sdk)
    sdk, ours = exchange(
        w,
        lambda: w.sdk_subscriber.agents.get_agent_plans(w.agent_id),
        lambda: w.subscriber.get_agent_plans(w.agent_id),
    )
    same(ours, sdk)
    sdk, ours = exchange(
        w,
        lambda: w.sdk_subscriber.plans.get_agents_associated_to_plan(w.plan_id),
        lambda: w.subscriber.get_plan_agents(w.plan_id),
    )
    same(ours, sdk)
    sdk, ours = exchange(
        w, lambda: w.sdk_builder.agents.get_user_agents(), lambda: w.builder.list_agents()
    )
    same(ours, sdk)


def test_card_delegation_and_fiat_token_request(world: World) -> None:
    w = world
    card = w.loop.run(w.subscriber.list_payment_methods())[0]
    sdk, ours = exchange(
        w,
        lambda: w.sdk_subscriber.delegation.create_delegation(
            CreateDelegationPayload(
                provider="stripe",
                provider_payment_method_id=card.id,
                spending_limit_cents=2500,
                duration_secs=900,
                currency="usd",
            )
        ),
        lambda: w.subscriber.create_delegation(
            "stripe", 2500, 900, "usd", payment_method_id=card.id
        ),
    )
    same(ours, sdk)
    delegation = w.loop.run(
        w.subscriber.create_delegation("stripe", 2500, 900, "usd", payment_method_id=card.id)
    )
    sdk, ours = exchange(
        w,
        lambda: w.sdk_subscriber.x402.get_x402_access_token(
            w.fiat_plan_id,
            None,
            token_options=X402TokenOptions(
                scheme="nvm:card-delegation",
                delegation_config=DelegationConfig(delegation_id=delegation.delegation_id),
            ),
        ),
        lambda: w.subscriber.create_access_token(
            w.fiat_plan_id, delegation.delegation_id, scheme="svc:card-delegation"
        ),
    )
    same(ours, sdk)
