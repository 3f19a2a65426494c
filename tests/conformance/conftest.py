"""The official ``payments-py`` SDK, unmodified, driven against the local sandbox on 127.0.0.1.

One sandbox per test module runs on its own event loop in a background thread; the SDK is
synchronous (``requests``) and runs in the test thread. The SDK reaches the sandbox through its
``custom`` environment (``NVM_BACKEND_URL``), which it picks because sandbox keys carry the
``local:`` prefix that it does not recognise.

Brand strings are the one allowed difference between the SDK's service and ours (issue 8), so a
shim on the SDK's HTTP adapter translates exactly those and nothing else, in both directions:

* the request header ``Nevermined-Version`` is sent as ``Service-Version``;
* JSON string values ``nvm:erc4337`` / ``nvm:card-delegation`` become ``svc:...`` on the way
  out, and ``svc:...`` become ``nvm:...`` in JSON answers (access tokens are opaque strings and
  are never touched).

The same shim records every request the SDK sends (method, path, query, body; never the
Authorization header) so a finding can quote it, and refuses any host but 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlsplit

import pytest
import requests
import requests.adapters
from payments_py import PaymentOptions, Payments
from payments_py import environments as sdk_environments
from payments_py.common.types import PlanMetadata
from payments_py.plans import (
    get_dynamic_credits_config,
    get_erc20_price_config,
    get_expirable_duration_config,
    get_fiat_price_config,
    get_fixed_credits_config,
)
from payments_py.x402.types import CreateDelegationPayload

from svc_gateway.sandbox import SandboxServer, start_sandbox

T = TypeVar("T")

USDC = "0x036CbD53842c5426634e7929541eC2318f3dCF7e"
SDK_BRAND = "nvm:"
OUR_BRAND = "svc:"
SCHEMES = ("erc4337", "card-delegation")
#: A delegation budget below one order of a 1 USDC plan (100 cents): its tokens never top up.
NO_TOPUP_CENTS = 99


class Clock:
    """The sandbox's clock, moved by hand (starts at real time so dates read sensibly)."""

    def __init__(self) -> None:
        self.now = float(int(time.time()))

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class LoopThread:
    """An asyncio loop in a daemon thread; ``run`` executes a coroutine there and waits."""

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


@dataclass(frozen=True)
class Sent:
    """One request as the SDK sent it (before brand translation)."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any


@dataclass
class Recorder:
    sent: list[Sent] = field(default_factory=list)

    def last(self, method: str, path_suffix: str) -> Sent:
        for item in reversed(self.sent):
            if item.method == method and item.path.endswith(path_suffix):
                return item
        raise AssertionError(f"the SDK sent no {method} …{path_suffix}")


def _rebrand(value: Any, old: str, new: str) -> Any:
    if isinstance(value, str):
        for scheme in SCHEMES:
            if value == old + scheme:
                return new + scheme
        return value
    if isinstance(value, dict):
        return {k: _rebrand(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [_rebrand(v, old, new) for v in value]
    return value


def install_shim(monkeypatch: pytest.MonkeyPatch, recorder: Recorder) -> None:
    original = requests.adapters.HTTPAdapter.send

    def send(
        self: requests.adapters.HTTPAdapter, request: requests.PreparedRequest, **kwargs: Any
    ) -> requests.Response:
        url = urlsplit(request.url or "")
        if url.hostname != "127.0.0.1":
            raise requests.ConnectionError(f"conformance tests reach 127.0.0.1 only, not {url}")
        body: Any = None
        if request.body:
            raw = request.body.decode() if isinstance(request.body, bytes) else request.body
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw
        shown = {k: v for k, v in request.headers.items() if k.lower() != "authorization"}
        recorder.sent.append(
            Sent(request.method or "", url.path, dict(parse_qsl(url.query)), shown, body)
        )
        version = request.headers.pop("Nevermined-Version", None)
        if version is not None:
            request.headers["Service-Version"] = version
        if isinstance(body, (dict, list)):
            request.body = json.dumps(_rebrand(body, SDK_BRAND, OUR_BRAND)).encode()
            request.headers["Content-Length"] = str(len(request.body))
        response = original(self, request, **kwargs)
        if "Service-Version" in response.headers:
            response.headers["Nevermined-Version"] = response.headers["Service-Version"]
        content = response.content
        if content:
            try:
                answer = json.loads(content)
            except ValueError:
                return response
            response._content = json.dumps(_rebrand(answer, OUR_BRAND, SDK_BRAND)).encode()
        return response

    monkeypatch.setattr(requests.adapters.HTTPAdapter, "send", send)


def point_sdk_at(mp: pytest.MonkeyPatch, origin: str, recorder: Recorder) -> None:
    """The SDK's every environment on the sandbox at ``origin``, through the brand shim."""
    mp.setenv("NVM_BACKEND_URL", origin)
    loopback = sdk_environments.EnvironmentInfo(
        backend=origin, proxy=origin, helicone_url=origin, frontend=origin
    )
    # Every environment points at loopback: even a key whose prefix the SDK maps to a
    # hosted environment can never leave this machine.
    for name in list(sdk_environments.Environments):
        mp.setitem(sdk_environments.Environments, name, loopback)
    install_shim(mp, recorder)


@dataclass
class Sdk:
    """The running sandbox plus SDK clients for two accounts: a builder and a subscriber."""

    server: SandboxServer
    loop: LoopThread
    clock: Clock
    recorder: Recorder
    origin: str
    builder: Payments
    subscriber: Payments
    builder_address: str
    subscriber_address: str

    def account(self, label: str) -> tuple[Payments, str]:
        """A fresh account (own balances) and its SDK client."""
        created = self.loop.run(self.server.create_account(label))
        return payments_for(created["apiKey"]), created["address"]


def payments_for(api_key: str) -> Payments:
    return Payments.get_instance(PaymentOptions(nvm_api_key=api_key))


@pytest.fixture(scope="module")
def sdk() -> Iterator[Sdk]:
    loop = LoopThread()
    clock = Clock()
    recorder = Recorder()
    with pytest.MonkeyPatch.context() as mp:
        try:
            server = loop.run(start_sandbox("127.0.0.1", 0, clock=clock))
        except BaseException:
            loop.stop()
            raise
        try:
            origin = server.origin
            point_sdk_at(mp, origin, recorder)
            builder = loop.run(server.create_account("builder"))
            subscriber = loop.run(server.create_account("subscriber"))
            yield Sdk(
                server=server,
                loop=loop,
                clock=clock,
                recorder=recorder,
                origin=origin,
                builder=payments_for(builder["apiKey"]),
                subscriber=payments_for(subscriber["apiKey"]),
                builder_address=builder["address"],
                subscriber_address=subscriber["address"],
            )
        finally:
            loop.run(server.close())
            loop.stop()


# -- builders for the SDK's own configuration objects -----------------------------------------


def usdc_price(sdk: Sdk, amount: int = 1_000_000) -> Any:
    return get_erc20_price_config(amount, USDC, sdk.builder_address)


def fiat_price(sdk: Sdk, amount: int = 2_000_000) -> Any:
    return get_fiat_price_config(amount, sdk.builder_address)


def credits_plan(sdk: Sdk, name: str = "Credits", credits: int = 100, per_request: int = 1) -> str:
    """A fixed USDC credits plan owned by the builder; returns its id."""
    answer = sdk.builder.plans.register_credits_plan(
        PlanMetadata(name=name, description="conformance"),
        usdc_price(sdk),
        get_fixed_credits_config(credits, per_request),
    )
    return str(answer["planId"])


def dynamic_plan(sdk: Sdk, low: int, high: int, credits: int = 100) -> str:
    answer = sdk.builder.plans.register_credits_plan(
        PlanMetadata(name="Dynamic", description="conformance"),
        usdc_price(sdk),
        get_dynamic_credits_config(credits, low, high),
    )
    return str(answer["planId"])


def time_plan(sdk: Sdk, seconds: int = 3600) -> str:
    answer = sdk.builder.plans.register_time_plan(
        PlanMetadata(name="Hourly", description="conformance"),
        usdc_price(sdk),
        get_expirable_duration_config(seconds),
    )
    return str(answer["planId"])


def crypto_delegation(payments: Payments, limit_cents: int = 100_000) -> str:
    created = payments.delegation.create_delegation(
        CreateDelegationPayload(
            provider="erc4337",
            spending_limit_cents=limit_cents,
            duration_secs=86_400,
            currency="usdc",
        )
    )
    return str(created.delegation_id)
