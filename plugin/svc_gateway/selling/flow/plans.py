"""What the endpoint must know about the plan it sells (scheme, network, credit bounds, names,
receiver, credits asset), and the one builder of the x402 envelope every way to sell sends.

Fetched from the service (``GET /protocol/plans/{id}``, public) and cached per id for five
minutes, the SDKs' interval (WIRE.md §7). Concurrent misses share one fetch, so a burst of
paid requests right after start costs one plan read, not hundreds.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ...config import PluginConfig
from ...encoding import ZERO_ADDRESS
from ...redact import get_logger
from ...service.client import default_network
from ...service.errors import RateLimited, ServiceError, ServiceUnavailable, TransportError
from ...service.models import SCHEME_CRYPTO, Accept, PaymentRequirement, Plan, Resource, Scheme
from ...service.seller import SellerSettings

log = get_logger("svc_gateway.paid")

PLAN_CACHE_TTL_SECS = 300.0
PLAN_CACHE_SIZE = 64
#: errors meaning "the service is unreachable right now": answered 503, never 402
OUTAGE_ERRORS: tuple[type[ServiceError], ...] = (TransportError, ServiceUnavailable, RateLimited)
#: what a CAIP-19 asset reference may hold; anything else in a plan id is percent-encoded
_CAIP19_REFERENCE = re.compile(r"[-.a-zA-Z0-9]")
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{40}")


@dataclass(frozen=True)
class PlanFacts:
    """The plan's payment scheme, network and per-request credit range (``None``: unknown)."""

    plan_id: str
    scheme: Scheme
    network: str
    min_amount: int | None = None
    max_amount: int | None = None
    name: str | None = None
    description: str | None = None
    #: a time plan sells access for a duration, not credits: verify checks the window
    is_time: bool = False
    #: who the plan's price goes to: its first receiver, else its owner (x402 ``payTo``)
    pay_to: str | None = None
    #: the plan's credits contract (ERC-1155, the plan id its token id), when the plan names it
    credits_contract: str | None = None
    #: the CAIP-2 chain the plan's credits live on: the environment's, whatever the payment rail
    credits_chain: str = "eip155:84532"

    @classmethod
    def from_plan(cls, plan: Plan, environment: str) -> PlanFacts:
        registry = plan.registry
        credits = registry.credits
        receivers = [r for r in registry.price.receivers if r]
        contract = registry.nft_address or credits.nft_address
        return cls(
            plan_id=plan.id,
            scheme=plan.scheme,
            network=default_network(plan.scheme, environment, plan),
            min_amount=credits.min_amount,
            max_amount=credits.max_amount,
            name=plan.metadata.main.name or None,
            description=plan.metadata.main.description,
            is_time=plan.is_time_plan,
            pay_to=(receivers[0] if receivers else None) or registry.owner or plan.owner,
            credits_contract=contract if contract and _ADDRESS.fullmatch(contract) else None,
            credits_chain=default_network(SCHEME_CRYPTO, environment),
        )

    @classmethod
    def fallback(cls, plan_id: str, environment: str) -> PlanFacts:
        """WIRE.md §7 when the plan cannot be read: crypto on the environment's network."""
        network = default_network(SCHEME_CRYPTO, environment)
        return cls(plan_id, SCHEME_CRYPTO, network, credits_chain=network)

    @property
    def asset(self) -> str:
        """x402 ``asset``: the plan's credits as a CAIP-19 id, ``<chain>/erc1155:<credits
        contract>/<plan id>``; ``<chain>/svc:<plan id>`` when the plan names no contract."""
        plan = "".join(
            c if _CAIP19_REFERENCE.fullmatch(c) else "".join(f"%{b:02X}" for b in c.encode())
            for c in self.plan_id
        )
        if self.credits_contract and self.credits_contract != ZERO_ADDRESS:
            return f"{self.credits_chain}/erc1155:{self.credits_contract}/{plan}"
        return f"{self.credits_chain}/svc:{plan}"

    def clamp(self, credits: int) -> int:
        """Credits per request lie in the plan's [minAmount, maxAmount] (SPEC.md Limits)."""
        low = self.min_amount if self.min_amount is not None else 0
        value = max(credits, low, 0)
        if self.max_amount is not None and self.max_amount >= low:
            value = min(value, self.max_amount)
        return value


PlanFetch = Callable[[str], Awaitable[Plan]]


class PlanFactsCache:
    """Plan facts per plan id: a bounded TTL cache with single-flight misses.

    An outage (network, 5xx, 429) propagates so the caller answers 503; any other failure
    (unknown plan, odd answer) yields uncached fallback facts, as the SDKs do.
    """

    def __init__(
        self,
        *,
        ttl: float = PLAN_CACHE_TTL_SECS,
        maxsize: int = PLAN_CACHE_SIZE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        #: plan id → (facts, read until): a plain dict, read on every paid request
        self._cache: dict[str, tuple[PlanFacts, float]] = {}
        self._inflight: dict[str, asyncio.Future[PlanFacts]] = {}
        self._maxsize = maxsize
        self._ttl = ttl
        self._clock = clock
        self.fetches = 0

    def peek(self, plan_id: str) -> PlanFacts | None:
        entry = self._cache.get(plan_id)
        if entry is None:
            return None
        if self._clock() > entry[1]:  # expired
            self._cache.pop(plan_id, None)
            return None
        return entry[0]

    def invalidate(self, plan_id: str | None = None) -> None:
        if plan_id is None:
            self._cache.clear()
        else:
            self._cache.pop(plan_id, None)

    def _keep(self, plan_id: str, facts: PlanFacts) -> None:
        """Cache ``facts`` for the TTL; when full, the expired entries go, then the oldest."""
        now = self._clock()
        if plan_id not in self._cache and len(self._cache) >= self._maxsize:
            for key in [key for key, (_, until) in self._cache.items() if now > until]:
                del self._cache[key]
            while len(self._cache) >= self._maxsize:
                del self._cache[next(iter(self._cache))]
        self._cache.pop(plan_id, None)  # re-inserted last: the newest
        self._cache[plan_id] = (facts, now + self._ttl)

    async def get(self, plan_id: str, fetch: PlanFetch, environment: str) -> PlanFacts:
        cached = self.peek(plan_id)
        if cached is not None:
            return cached
        pending = self._inflight.get(plan_id)
        if pending is not None:
            return await asyncio.shield(pending)
        if len(self._inflight) >= self._maxsize:  # the map of shared fetches stays bounded
            return await self._load(plan_id, fetch, environment)
        future: asyncio.Future[PlanFacts] = asyncio.get_running_loop().create_future()
        self._inflight[plan_id] = future
        try:
            facts = await self._load(plan_id, fetch, environment)
        except asyncio.CancelledError:
            future.cancel()
            raise
        except Exception as exc:
            future.set_exception(exc)
            future.exception()  # mark retrieved: waiters (if any) re-raise it themselves
            raise
        else:
            future.set_result(facts)
            return facts
        finally:
            self._inflight.pop(plan_id, None)

    async def _load(self, plan_id: str, fetch: PlanFetch, environment: str) -> PlanFacts:
        self.fetches += 1
        try:
            plan = await fetch(plan_id)
        except OUTAGE_ERRORS:
            raise
        except ServiceError as exc:
            log.warning(
                "could not read plan %s (%s); assuming a crypto plan until it can be read",
                plan_id,
                exc.code,
            )
            return PlanFacts.fallback(plan_id, environment)
        facts = PlanFacts.from_plan(plan, environment)
        self._keep(plan_id, facts)
        return facts


def payment_deadline_secs(config: PluginConfig | SellerSettings) -> int:
    """x402 ``maxTimeoutSeconds``: the longest a paid request can take from its arrival to its
    settle (verify's budget, the handler's deadline, settle's budget), whole seconds."""
    total = 2 * config.paid_budget_secs + config.handler_timeout_secs
    return max(1, math.ceil(total))


def build_envelope(
    facts: PlanFacts,
    agent_id: str | None,
    url: str,
    error: str | None = None,
    *,
    verb: str = "POST",
    description: str | None = None,
    mime_type: str | None = None,
    amount: int,
    max_timeout_secs: int,
) -> PaymentRequirement:
    """The x402 v2 envelope for one request (WIRE.md §5): absolute URL, the HTTP verb, the
    plan's scheme and network, the agent id when known; a route's description and MIME type;
    x402's price terms: ``amount`` (the credits verified: the request's price, or the ceiling
    of one priced from its result), the plan's credits ``asset``, ``payTo`` the plan's
    receiver, ``maxTimeoutSeconds`` the request's deadline. The one builder behind the paid
    endpoint's and the middleware's 402s and MCP's PaymentRequired results."""
    extra: dict[str, str] = {"version": "1"}
    if agent_id:
        extra["agentId"] = agent_id
    extra["httpVerb"] = verb
    accept = Accept(
        scheme=facts.scheme,
        network=facts.network,
        plan_id=facts.plan_id,
        extra=extra,
        amount=max(amount, 0),
        asset=facts.asset,
        pay_to=facts.pay_to or ZERO_ADDRESS,
        max_timeout_seconds=max_timeout_secs,
    )
    return PaymentRequirement(
        error=error,
        resource=Resource(url=url, description=description, mime_type=mime_type),
        accepts=[accept],
    )
