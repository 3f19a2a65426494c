"""The async service client: one pooled ``httpx.AsyncClient``, typed answers, typed errors.

Every request carries ``Service-Version``; authenticated ones carry the Bearer key. Calls that
are safe to repeat (reads, verify, settle with an ``agentRequestId``) retry with capped,
jittered exponential backoff on 429/502/503/504 and connection errors, honouring Retry-After.
Orders, registrations and token creation are never retried: a retry could buy twice.
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx
from pydantic import SecretStr, ValidationError

from . import errors
from .config import DEFAULT_API_VERSION, DEFAULT_NETWORK, ApiKey, parse_api_key
from .encoding import decode_access_token, is_address
from .models import (
    SCHEME_CARD,
    SCHEME_CRYPTO,
    Agent,
    AgentApi,
    AgentMetadata,
    AgentPage,
    CreditsConfig,
    Delegation,
    FiatCheckout,
    OrderResult,
    PaymentMethod,
    PaymentRequirement,
    Plan,
    PlanBalance,
    PlanMetadata,
    PlanPage,
    PriceConfig,
    RegisteredIds,
    Scheme,
    SettleResult,
    VerifyResult,
    VersionInfo,
    WireModel,
    delegation_from_answer,
)
from .redact import get_logger

log = get_logger("plugin.client")
M = TypeVar("M", bound=WireModel)

RETRY_STATUSES = frozenset({429, 502, 503, 504})
CARD_PROVIDERS = ("stripe", "braintree", "visa")
DELEGATION_RENEW_MARGIN_SECS = 60.0


def default_network(scheme: str, environment: str | None, plan: Plan | None = None) -> str:
    """Network for an envelope or token (WIRE.md §7)."""
    if scheme == SCHEME_CARD:
        provider = plan.metadata.plan.fiat_payment_provider if plan else None
        return provider or "stripe"
    return DEFAULT_NETWORK.get(environment or "", "eip155:84532")


class ServiceClient:
    """Async client for the Agent Payments Service REST API (WIRE.md §2–§8)."""

    def __init__(
        self,
        base_url: str,
        api_key: str | SecretStr | None = None,
        *,
        environment: str | None = None,
        api_version: str = DEFAULT_API_VERSION,
        timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
        max_retries: int = 3,
        backoff_base: float = 0.25,
        backoff_cap: float = 8.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._key: ApiKey | None = parse_api_key(api_key) if api_key else None
        self.environment = environment or (self._key.environment if self._key else None)
        self.base_url = base_url.rstrip("/")
        self.api_version = api_version
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self._sleep = sleep
        self._delegations: dict[str, Delegation] = {}
        self._delegation_lock = asyncio.Lock()
        self._http = httpx.AsyncClient(
            base_url=self.base_url + "/",
            timeout=httpx.Timeout(timeout, connect=min(10.0, timeout)),
            transport=transport,
            headers={
                "Accept": "application/json",
                "Content-Type": "application/json",
                "Service-Version": api_version,
            },
            limits=httpx.Limits(max_connections=50, max_keepalive_connections=50),
            follow_redirects=False,
        )

    def __repr__(self) -> str:
        who = self._key.address if self._key else "anonymous"
        return f"ServiceClient(base_url={self.base_url!r}, account={who!r})"

    @property
    def address(self) -> str | None:
        return self._key.address if self._key else None

    @property
    def authenticated(self) -> bool:
        return self._key is not None

    async def aclose(self) -> None:
        await self._http.aclose()

    # -- transport ---------------------------------------------------------------------------

    def _auth_headers(self) -> dict[str, str]:
        if self._key is None:
            raise errors.NotLoggedIn()
        if self._key.expired:
            raise errors.AuthenticationError(
                "The API key has expired", code="key_expired", status=None
            )
        return {"Authorization": f"Bearer {self._key.secret.get_secret_value()}"}

    async def _request(
        self,
        method: str,
        path: str,
        *,
        auth: bool = True,
        body: dict[str, Any] | None = None,
        params: dict[str, Any] | None = None,
        retry: bool = False,
    ) -> Any:
        headers = self._auth_headers() if auth else {}
        attempts = self.max_retries + 1 if retry else 1
        for attempt in range(1, attempts + 1):
            try:
                response = await self._http.request(
                    method, path.lstrip("/"), json=body, params=params, headers=headers
                )
            except httpx.TimeoutException:
                failure: errors.ServiceError = errors.RequestTimeout(
                    f"{method} {path} timed out", code="timeout"
                )
            except httpx.TransportError as exc:
                failure = errors.TransportError(
                    f"{method} {path} failed: {type(exc).__name__}", code="network_error"
                )
            else:
                log.debug(
                    "%s %s -> %s (Service-Version %s from %s)",
                    method,
                    path,
                    response.status_code,
                    response.headers.get("Service-Version"),
                    response.headers.get("Service-Version-Resolved-From"),
                )
                if response.is_success:
                    return _json_or_raise(response, method, path)
                failure = self._error(response)
                if response.status_code not in RETRY_STATUSES:
                    raise failure
            if attempt >= attempts:
                raise failure
            delay = self._delay(attempt, failure)
            if delay is None:
                raise failure
            log.info("retrying %s %s in %.2fs (%s)", method, path, delay, failure.code)
            await self._sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    def _delay(self, attempt: int, failure: errors.ServiceError) -> float | None:
        if isinstance(failure, errors.RateLimited) and failure.retry_after is not None:
            # the service told us when; waiting longer than the cap is the caller's decision
            return None if failure.retry_after > self.backoff_cap * 4 else failure.retry_after
        ceiling = min(self.backoff_cap, self.backoff_base * (2 ** (attempt - 1)))
        return random.uniform(ceiling / 2, ceiling)

    def _error(self, response: httpx.Response) -> errors.ServiceError:
        status = response.status_code
        code, message, hint = _envelope(response)
        kwargs: dict[str, Any] = {"status": status, "code": code, "hint": hint}
        if code == "BCK.VERSION.0001":
            return errors.VersionRejected(
                f"The service rejected Service-Version {self.api_version}: {message}",
                version_sent=self.api_version,
                **kwargs,
            )
        if status == 401:
            return errors.AuthenticationError(message, **kwargs)
        if status == 402:
            return errors.PaymentRequired(message, **kwargs)
        if status == 403:
            return errors.PermissionDenied(message, **kwargs)
        if status == 404:
            return errors.NotFound(message, **kwargs)
        if status == 409:
            return errors.Conflict(message, **kwargs)
        if status == 429:
            return errors.RateLimited(
                message, retry_after=_retry_after(response.headers.get("Retry-After")), **kwargs
            )
        if status >= 500:
            return errors.ServiceUnavailable(message, **kwargs)
        return errors.InvalidRequest(message, **kwargs)

    # -- plans -------------------------------------------------------------------------------

    async def list_plans(
        self,
        page: int = 1,
        page_size: int = 10,
        sort_by: str | None = None,
        sort_order: str = "desc",
    ) -> PlanPage:
        params: dict[str, Any] = {"page": page, "offset": page_size, "sortOrder": sort_order}
        if sort_by:
            params["sortBy"] = sort_by
        data = await self._request("GET", "protocol/plans", params=params, retry=True)
        return _parse(PlanPage, data)

    async def get_plan(self, plan_id: str) -> Plan:
        data = await self._request("GET", f"protocol/plans/{_seg(plan_id)}", auth=False, retry=True)
        return _parse(Plan, data)

    async def get_plan_balance(self, plan_id: str, holder: str | None = None) -> PlanBalance:
        """Balance of ``holder``, or of the key's own account when none is given."""
        address = holder if is_address(holder) else self.address
        if address is None:
            raise errors.NotLoggedIn()
        path = f"protocol/plans/{_seg(plan_id)}/balance/{address}"
        data = await self._request("GET", path, auth=False, retry=True)
        return _parse(PlanBalance, data)

    async def order_plan(self, plan_id: str) -> OrderResult:
        data = await self._request("POST", f"protocol/plans/{_seg(plan_id)}/order")
        result = _parse(OrderResult, data)
        if not result.success:
            raise errors.InvalidRequest(
                result.message or "The order was not accepted", code="order_failed"
            )
        return result

    async def order_fiat_plan(self, plan_id: str) -> FiatCheckout:
        body = {"planId": plan_id, "sessionType": "embedded"}
        data = await self._request("POST", "fiat/stripe/payment", body=body)
        checkout = FiatCheckout.from_answer(data if isinstance(data, dict) else {})
        if checkout is None:
            raise errors.ProtocolError(
                "The fiat order answer has no checkout URL", code="no_checkout_url"
            )
        return checkout

    async def register_plan(
        self,
        metadata: PlanMetadata,
        price: PriceConfig,
        credits: CreditsConfig,
        *,
        nonce: int | None = None,
        max_orders: int | None = None,
    ) -> str:
        """Register any plan kind; the kind follows from ``credits`` and ``metadata``."""
        is_trial = bool(metadata.is_trial_plan)
        body: dict[str, Any] = {
            "metadataAttributes": metadata.wire(),
            "priceConfig": price.wire(),
            "creditsConfig": credits.wire(),
            "nonce": str(nonce if nonce is not None else secrets.randbits(128)),
            "isTrialPlan": is_trial,
            "accessLimit": "time" if credits.duration_secs > 0 else "credits",
        }
        if price.currency:
            body["currency"] = price.currency
        if max_orders is not None:
            body["maxOrders"] = str(max_orders)
        data = await self._request("POST", "protocol/plans", body=body)
        return _require_str(data, "planId")

    async def register_credits_plan(
        self, metadata: PlanMetadata, price: PriceConfig, credits: CreditsConfig, **kw: Any
    ) -> str:
        if credits.duration_secs:
            raise ValueError("a credits plan has durationSecs 0")
        return await self.register_plan(metadata, price, credits, **kw)

    async def register_time_plan(
        self, metadata: PlanMetadata, price: PriceConfig, credits: CreditsConfig, **kw: Any
    ) -> str:
        if credits.duration_secs <= 0:
            raise ValueError("a time plan needs durationSecs > 0")
        return await self.register_plan(metadata, price, credits, **kw)

    async def register_credits_trial_plan(
        self, metadata: PlanMetadata, price: PriceConfig, credits: CreditsConfig, **kw: Any
    ) -> str:
        trial = metadata.model_copy(update={"is_trial_plan": True})
        return await self.register_credits_plan(trial, price, credits, **kw)

    async def register_time_trial_plan(
        self, metadata: PlanMetadata, price: PriceConfig, credits: CreditsConfig, **kw: Any
    ) -> str:
        trial = metadata.model_copy(update={"is_trial_plan": True})
        return await self.register_time_plan(trial, price, credits, **kw)

    async def mint_credits(self, plan_id: str, amount: int, receiver: str) -> dict[str, Any]:
        body = {"amount": str(amount), "receiver": receiver}
        data = await self._request("POST", f"protocol/plans/{_seg(plan_id)}/mint", body=body)
        return data if isinstance(data, dict) else {}

    # -- agents ------------------------------------------------------------------------------

    async def register_agent(
        self, metadata: AgentMetadata, api: AgentApi, plan_ids: list[str]
    ) -> str:
        body = {
            "metadataAttributes": metadata.wire(),
            "agentApiAttributes": api.wire(),
            "plans": list(plan_ids),
        }
        data = await self._request("POST", "protocol/agents", body=body)
        return _require_str(_data(data), "agentId")

    async def register_agent_and_plan(
        self,
        agent_metadata: AgentMetadata,
        api: AgentApi,
        plan_metadata: PlanMetadata,
        price: PriceConfig,
        credits: CreditsConfig,
    ) -> RegisteredIds:
        plan: dict[str, Any] = {
            "metadataAttributes": plan_metadata.wire(),
            "priceConfig": price.wire(),
            "creditsConfig": credits.wire(),
            "accessLimit": "time" if credits.duration_secs > 0 else "credits",
        }
        body = {
            "plan": plan,
            "agent": {
                "metadataAttributes": agent_metadata.wire(),
                "agentApiAttributes": api.wire(),
            },
        }
        data = await self._request("POST", "protocol/agents/plans", body=body)
        ids = _parse(RegisteredIds, _data(data))
        if not ids.agent_id or not ids.plan_id:
            raise errors.ProtocolError("The registration answer lacks agentId or planId")
        return ids

    async def get_agent(self, agent_id: str) -> Agent:
        path = f"protocol/agents/{_seg(agent_id)}"
        return _parse(Agent, await self._request("GET", path, auth=False, retry=True))

    async def list_agents(self, page: int = 1, page_size: int = 10) -> AgentPage:
        params = {"page": page, "offset": page_size}
        data = await self._request("GET", "protocol/agents", params=params, retry=True)
        return _parse(AgentPage, data)

    async def get_plan_agents(self, plan_id: str, page: int = 1, page_size: int = 10) -> AgentPage:
        params = {"page": page, "offset": page_size}
        path = f"protocol/plans/{_seg(plan_id)}/agents"
        data = await self._request("GET", path, auth=False, params=params, retry=True)
        return _parse(AgentPage, data)

    async def get_agent_plans(self, agent_id: str, page: int = 1, page_size: int = 10) -> PlanPage:
        params = {"page": page, "offset": page_size}
        path = f"protocol/agents/{_seg(agent_id)}/plans"
        data = await self._request("GET", path, auth=False, params=params, retry=True)
        return _parse(PlanPage, data)

    async def remove_plan_from_agent(self, agent_id: str, plan_id: str) -> bool:
        path = f"protocol/agents/{_seg(agent_id)}/plan/{_seg(plan_id)}"
        data = await self._request("DELETE", path, retry=True)
        return bool(isinstance(data, dict) and data.get("success"))

    # -- delegations, payment methods, tokens ------------------------------------------------

    async def create_delegation(
        self,
        provider: str,
        spending_limit_cents: int,
        duration_secs: int,
        currency: str,
        *,
        payment_method_id: str | None = None,
    ) -> Delegation:
        body: dict[str, Any] = {
            "provider": provider,
            "spendingLimitCents": spending_limit_cents,
            "durationSecs": duration_secs,
            "currency": currency,
        }
        if payment_method_id:
            body["providerPaymentMethodId"] = payment_method_id
        data = await self._request("POST", "delegation/create", body=body)
        delegation = delegation_from_answer(
            data if isinstance(data, dict) else {}, provider, duration_secs
        )
        if not delegation.delegation_id:
            raise errors.ProtocolError("The delegation answer has no delegationId")
        return delegation

    async def list_payment_methods(self, provider: str | None = None) -> list[PaymentMethod]:
        params = {"provider": provider} if provider else None
        data = await self._request("GET", "payment-methods", params=params, retry=True)
        items = data if isinstance(data, list) else (data or {}).get("paymentMethods", [])
        return [_parse(PaymentMethod, item) for item in items if isinstance(item, dict)]

    async def create_access_token(
        self,
        plan_id: str,
        delegation_id: str,
        *,
        agent_id: str | None = None,
        scheme: Scheme = SCHEME_CRYPTO,
        network: str | None = None,
    ) -> str:
        """``POST /x402/permissions`` with an existing delegation (never retried)."""
        if not delegation_id.strip():
            raise ValueError("a delegationId is required")
        body = {
            "accepted": {
                "scheme": scheme,
                "network": network or default_network(scheme, self.environment),
                "planId": plan_id,
                "extra": {"agentId": agent_id} if agent_id else {},
            },
            "delegationConfig": {"delegationId": delegation_id},
        }
        data = await self._request("POST", "x402/permissions", body=body)
        return _require_str(data, "accessToken")

    async def get_access_token(
        self,
        plan_id: str,
        *,
        agent_id: str | None = None,
        payment_type: str = "crypto",
        payment_method_id: str | None = None,
        spending_limit_cents: int = 10000,
        duration_secs: int = 7 * 24 * 3600,
    ) -> str:
        """The create-first flow: reuse (or create) a delegation, then mint a token."""
        fiat = payment_type == "fiat"
        scheme: Scheme = SCHEME_CARD if fiat else SCHEME_CRYPTO
        network: str | None = None
        if fiat:
            card = await self._pick_card(payment_method_id)
            network = card.provider if card.provider in CARD_PROVIDERS else "stripe"
            provider, currency, card_id = network, "usd", card.id
        else:
            provider, currency, card_id = "erc4337", "usdc", None
        for attempt in (1, 2):
            delegation = await self._delegation(
                provider, currency, card_id, spending_limit_cents, duration_secs
            )
            try:
                return await self.create_access_token(
                    plan_id,
                    delegation.delegation_id,
                    agent_id=agent_id,
                    scheme=scheme,
                    network=network,
                )
            except errors.ServiceError as exc:
                spent = exc.code in ("BCK.X402.0013", "BCK.X402.0023")
                if not spent or attempt == 2:
                    raise
                self._delegations.pop(_delegation_key(provider, card_id), None)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _pick_card(self, payment_method_id: str | None) -> PaymentMethod:
        cards = [m for m in await self.list_payment_methods() if m.is_card]
        if payment_method_id:
            for card in cards:
                if card.id == payment_method_id:
                    return card
            raise errors.NotFound(
                "No enrolled card has that paymentMethodId",
                code="payment_method_not_found",
                hint="List your cards with svc_listPaymentMethods.",
            )
        if not cards:
            raise errors.NotFound(
                "No card is enrolled on this account",
                code="no_payment_method",
                hint="Enroll a card in the dashboard, or pay with crypto.",
            )
        return cards[0]

    async def _delegation(
        self, provider: str, currency: str, card_id: str | None, limit: int, duration: int
    ) -> Delegation:
        key = _delegation_key(provider, card_id)
        async with self._delegation_lock:
            current = self._delegations.get(key)
            fresh = current is not None and (current.expires_at or 0) - time.time() > (
                DELEGATION_RENEW_MARGIN_SECS
            )
            if current is not None and fresh:
                return current
            created = await self.create_delegation(
                provider, limit, duration, currency, payment_method_id=card_id
            )
            self._delegations[key] = created
            return created

    def forget_delegations(self) -> None:
        self._delegations.clear()

    @staticmethod
    def decode_access_token(token: str) -> dict[str, Any] | None:
        return decode_access_token(token)

    # -- facilitator -------------------------------------------------------------------------

    async def verify(
        self, payment_required: PaymentRequirement, token: str, max_amount: int
    ) -> VerifyResult:
        body = {
            "paymentRequired": payment_required.wire(),
            "x402AccessToken": token,
            "maxAmount": str(max_amount),
        }
        data = await self._request("POST", "x402/verify", body=body, retry=True)
        return _parse(VerifyResult, data)

    async def settle(
        self,
        payment_required: PaymentRequirement,
        token: str,
        max_amount: int,
        agent_request_id: str | None,
    ) -> SettleResult:
        """Burn credits. Retried only with an ``agentRequestId`` (idempotent on it)."""
        body: dict[str, Any] = {
            "paymentRequired": payment_required.wire(),
            "x402AccessToken": token,
            "maxAmount": str(max_amount),
        }
        if agent_request_id:
            body["agentRequestId"] = agent_request_id
        data = await self._request("POST", "x402/settle", body=body, retry=bool(agent_request_id))
        return _parse(SettleResult, data)

    async def get_versions(self) -> VersionInfo:
        data = await self._request("GET", "meta/versions", retry=True)
        return _parse(VersionInfo, data)


# -- helpers ------------------------------------------------------------------------------------


def _delegation_key(provider: str, card_id: str | None) -> str:
    return f"{provider}:{card_id or ''}"


def _seg(value: str) -> str:
    """One URL path segment: ids never smuggle a ``/`` or ``..`` into the path."""
    from urllib.parse import quote

    return quote(str(value), safe=":")


def _envelope(response: httpx.Response) -> tuple[str | None, str, str | None]:
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        code = body.get("code") or body.get("errorCode")
        message = str(body.get("message") or body.get("error") or response.reason_phrase)
        hint = body.get("hint")
        details = body.get("details")
        if details and isinstance(details, str | int | float):
            message = f"{message} ({details})"
        return (str(code) if code else None), message, (str(hint) if hint else None)
    text = response.text[:200].strip() or response.reason_phrase
    return None, f"HTTP {response.status_code}: {text}", None


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value) if value else None
        if parsed is None:
            return None
        return max(0.0, parsed.timestamp() - time.time())


def _json_or_raise(response: httpx.Response, method: str, path: str) -> Any:
    if not response.content:
        return {}
    try:
        return response.json()
    except ValueError:
        raise errors.ProtocolError(
            f"{method} {path} answered {response.status_code} with a non-JSON body",
            status=response.status_code,
            code="bad_response",
        ) from None


def _parse(model: type[M], data: Any) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        fields = ", ".join(".".join(str(p) for p in e["loc"]) for e in exc.errors()[:3])
        raise errors.ProtocolError(
            f"The service's answer did not match {model.__name__} ({fields})",
            code="bad_response",
        ) from None


def _data(body: Any) -> dict[str, Any]:
    if isinstance(body, dict) and isinstance(body.get("data"), dict):
        return dict(body["data"])
    return body if isinstance(body, dict) else {}


def _require_str(body: Any, key: str) -> str:
    value = body.get(key) if isinstance(body, dict) else None
    if not isinstance(value, str) or not value:
        raise errors.ProtocolError(f"The service's answer has no {key}", code="bad_response")
    return value
