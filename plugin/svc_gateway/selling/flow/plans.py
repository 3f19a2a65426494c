"""What the endpoint must know about the plan it sells: scheme, network, credit bounds, names.

Fetched from the service (``GET /protocol/plans/{id}``, public) and cached per id for five
minutes, the SDKs' interval (WIRE.md §7). Concurrent misses share one fetch, so a burst of
paid requests right after start costs one plan read, not hundreds.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from cachetools import TTLCache

from ...redact import get_logger
from ...service.client import default_network
from ...service.errors import RateLimited, ServiceError, ServiceUnavailable, TransportError
from ...service.models import SCHEME_CRYPTO, Accept, PaymentRequirement, Plan, Resource, Scheme

log = get_logger("svc_gateway.paid")

PLAN_CACHE_TTL_SECS = 300.0
PLAN_CACHE_SIZE = 64
#: errors meaning "the service is unreachable right now": answered 503, never 402
OUTAGE_ERRORS: tuple[type[ServiceError], ...] = (TransportError, ServiceUnavailable, RateLimited)


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

    @classmethod
    def from_plan(cls, plan: Plan, environment: str) -> PlanFacts:
        credits = plan.registry.credits
        return cls(
            plan_id=plan.id,
            scheme=plan.scheme,
            network=default_network(plan.scheme, environment, plan),
            min_amount=credits.min_amount,
            max_amount=credits.max_amount,
            name=plan.metadata.main.name or None,
            description=plan.metadata.main.description,
            is_time=plan.is_time_plan,
        )

    @classmethod
    def fallback(cls, plan_id: str, environment: str) -> PlanFacts:
        """WIRE.md §7 when the plan cannot be read: crypto on the environment's network."""
        return cls(plan_id, SCHEME_CRYPTO, default_network(SCHEME_CRYPTO, environment))

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
        self._cache: TTLCache[str, PlanFacts] = TTLCache(maxsize=maxsize, ttl=ttl, timer=clock)
        self._inflight: dict[str, asyncio.Future[PlanFacts]] = {}
        self._maxsize = maxsize
        self.fetches = 0

    def peek(self, plan_id: str) -> PlanFacts | None:
        return self._cache.get(plan_id)

    def invalidate(self, plan_id: str | None = None) -> None:
        if plan_id is None:
            self._cache.clear()
        else:
            self._cache.pop(plan_id, None)

    async def get(self, plan_id: str, fetch: PlanFetch, environment: str) -> PlanFacts:
        cached = self._cache.get(plan_id)
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
        self._cache[plan_id] = facts
        return facts


def build_envelope(
    facts: PlanFacts,
    agent_id: str | None,
    url: str,
    error: str | None = None,
    *,
    verb: str = "POST",
    description: str | None = None,
    mime_type: str | None = None,
) -> PaymentRequirement:
    """The x402 v2 envelope for one request (WIRE.md §5): absolute URL, the HTTP verb, the
    plan's scheme and network, the agent id when known; a route's description and MIME type."""
    extra: dict[str, str] = {"version": "1"}
    if agent_id:
        extra["agentId"] = agent_id
    extra["httpVerb"] = verb
    return PaymentRequirement(
        error=error,
        resource=Resource(url=url, description=description, mime_type=mime_type),
        accepts=[
            Accept(scheme=facts.scheme, network=facts.network, plan_id=facts.plan_id, extra=extra)
        ],
    )
