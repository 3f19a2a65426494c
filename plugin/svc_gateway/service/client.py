"""The async service client: every operation the tools, the hook and the paid endpoint use.

Transport, retries and error mapping live in :mod:`.transport`, the delegations tokens are minted
against in :mod:`.delegations`; this module is the service's operations (WIRE.md §2–§8).
"""

from __future__ import annotations

import functools
import secrets
from typing import Any, Literal, cast

from pydantic import SecretStr

from ..config import DEFAULT_NETWORK
from ..encoding import decode_access_token, facilitator_body, is_address
from . import errors
from .delegations import CARD_PROVIDERS, DelegationPool, delegation_from_answer, pick_card
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
    Onboarded,
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
)
from .transport import ApiTransport, data_of, parse_model, require_str, seg


def default_network(scheme: str, environment: str | None, plan: Plan | None = None) -> str:
    """Network for an envelope or token (WIRE.md §7)."""
    if scheme == SCHEME_CARD:
        provider = plan.metadata.plan.fiat_payment_provider if plan else None
        return provider or "stripe"
    return DEFAULT_NETWORK.get(environment or "", "eip155:84532")


class ServiceClient(ApiTransport):
    """Async client for the Agent Payments Service REST API (WIRE.md §2–§8)."""

    @functools.cached_property
    def _delegations(self) -> DelegationPool:
        """Delegations created by this client, reused until they expire (WIRE.md §6)."""
        return DelegationPool(self.create_delegation)

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
        return parse_model(PlanPage, data)

    async def get_plan(self, plan_id: str) -> Plan:
        data = await self._request("GET", f"protocol/plans/{seg(plan_id)}", auth=False, retry=True)
        return parse_model(Plan, data)

    async def get_plan_balance(self, plan_id: str, holder: str | None = None) -> PlanBalance:
        """Balance of ``holder``, or of the key's own account when none is given."""
        address = holder if is_address(holder) else self.address
        if address is None:
            raise errors.NotLoggedIn()
        path = f"protocol/plans/{seg(plan_id)}/balance/{address}"
        data = await self._request("GET", path, auth=False, retry=True)
        return parse_model(PlanBalance, data)

    async def order_plan(self, plan_id: str) -> OrderResult:
        data = await self._request("POST", f"protocol/plans/{seg(plan_id)}/order")
        result = parse_model(OrderResult, data)
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

    async def onboard_customer(self, email: str, organization_id: str | None = None) -> Onboarded:
        """``POST /organizations/account`` with ``as: customer`` (admin of an organization):
        a white-label customer account and its own API key (``walletResult.hash``, the usable
        Bearer), or ``consentRequired`` when the address belongs to an account the organization
        does not own (payments-py ``OrganizationsAPI.onboard_customer``). Never retried: it
        creates an account."""
        headers = {"X-Current-Org-Id": organization_id} if organization_id else None
        body = {"email": email, "as": "customer"}
        data = await self._request("POST", "organizations/account", body=body, headers=headers)
        wallet = data.get("walletResult") if isinstance(data, dict) else None
        if not isinstance(wallet, dict):
            raise errors.ProtocolError(
                "The onboarding answer has no walletResult", code="bad_onboarding"
            )
        if wallet.get("consentRequired"):
            return Onboarded(None, None, consent_required=True)
        key, address = wallet.get("hash"), wallet.get("userWallet")
        if not isinstance(key, str) or not key or not isinstance(address, str):
            raise errors.ProtocolError(
                "The onboarding answer carries no usable API key", code="bad_onboarding"
            )
        return Onboarded(SecretStr(key), address, consent_required=False)

    async def register_plan(
        self,
        metadata: PlanMetadata,
        price: PriceConfig,
        credits: CreditsConfig,
        *,
        nonce: int | None = None,
        max_orders: int | None = None,
        access_limit: Literal["credits", "time"] | None = None,
    ) -> str:
        """Register any plan kind; the kind follows from ``credits`` and ``metadata`` (or
        ``access_limit``: ``time`` with ``durationSecs`` 0 never expires, as in payments-py).

        ``max_orders`` is refused before anything is sent: the service has no order-count
        limit (the official SDK sends none, and the service drops unknown fields silently),
        so a plan registered "with" one would sell without limit.
        """
        if max_orders is not None:
            raise errors.InvalidRequest(
                "The payments service cannot limit how many times a plan is ordered: the limit "
                "would be ignored and the plan would sell without one",
                code="order_limit_unsupported",
                hint="Leave the order limit out, or cap sales with a credits or trial plan.",
            )
        is_trial = bool(metadata.is_trial_plan)
        body: dict[str, Any] = {
            "metadataAttributes": metadata.wire(),
            "priceConfig": price.wire(),
            "creditsConfig": credits.wire(),
            "nonce": str(nonce if nonce is not None else secrets.randbits(128)),
            "isTrialPlan": is_trial,
            "accessLimit": access_limit or ("time" if credits.duration_secs > 0 else "credits"),
        }
        if price.currency:
            body["currency"] = price.currency
        data = await self._request("POST", "protocol/plans", body=body)
        return require_str(data, "planId")

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
        """``POST /protocol/plans/mint`` (owner only), the SDK's route and body."""
        body = {"planId": plan_id, "amount": _sdk_int(amount), "creditsReceiver": receiver}
        data = await self._request("POST", "protocol/plans/mint", body=body)
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
        return require_str(data_of(data), "agentId")

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
        ids = parse_model(RegisteredIds, data_of(data))
        if not ids.agent_id or not ids.plan_id:
            raise errors.ProtocolError("The registration answer lacks agentId or planId")
        return ids

    async def get_agent_document(self, agent_id: str) -> dict[str, Any]:
        """The agent object as the service sends it, for fields the models do not name (the
        registered endpoints svc_queryAgent checks a URL against)."""
        path = f"protocol/agents/{seg(agent_id)}"
        data = await self._request("GET", path, auth=False, retry=True)
        if not isinstance(data, dict):
            raise errors.ProtocolError("The agent answer is not a JSON object")
        return data

    async def get_agent(self, agent_id: str) -> Agent:
        path = f"protocol/agents/{seg(agent_id)}"
        return parse_model(Agent, await self._request("GET", path, auth=False, retry=True))

    async def list_agents(
        self,
        page: int = 1,
        page_size: int = 10,
        sort_by: str | None = None,
        sort_order: str = "desc",
    ) -> AgentPage:
        """The caller's own agents (``GET /protocol/agents``, paged and sorted as the SDK)."""
        params: dict[str, Any] = {"page": page, "offset": page_size, "sortOrder": sort_order}
        if sort_by:
            params["sortBy"] = sort_by
        data = await self._request("GET", "protocol/agents", params=params, retry=True)
        return parse_model(AgentPage, data)

    async def get_plan_agents(self, plan_id: str, page: int = 1, page_size: int = 10) -> AgentPage:
        params = {"page": page, "offset": page_size}
        path = f"protocol/plans/{seg(plan_id)}/agents"
        data = await self._request("GET", path, auth=False, params=params, retry=True)
        return parse_model(AgentPage, data)

    async def get_agent_plans(self, agent_id: str, page: int = 1, page_size: int = 10) -> PlanPage:
        params = {"page": page, "offset": page_size}
        path = f"protocol/agents/{seg(agent_id)}/plans"
        data = await self._request("GET", path, auth=False, params=params, retry=True)
        return parse_model(PlanPage, data)

    async def remove_plan_from_agent(self, agent_id: str, plan_id: str) -> bool:
        path = f"protocol/agents/{seg(agent_id)}/plan/{seg(plan_id)}"
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
        max_transactions: int | None = None,
    ) -> Delegation:
        """``POST /delegation/create``; ``max_transactions`` caps the settles it backs."""
        body: dict[str, Any] = {
            "provider": provider,
            "spendingLimitCents": spending_limit_cents,
            "durationSecs": duration_secs,
            "currency": currency,
        }
        if payment_method_id:
            body["providerPaymentMethodId"] = payment_method_id
        if max_transactions is not None:
            body["maxTransactions"] = max_transactions
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
        return [parse_model(PaymentMethod, item) for item in items if isinstance(item, dict)]

    async def create_access_token(
        self,
        plan_id: str,
        delegation_id: str,
        *,
        agent_id: str | None = None,
        scheme: Scheme = SCHEME_CRYPTO,
        network: str | None = None,
        resource_url: str | None = None,
        http_verb: str = "POST",
    ) -> str:
        """``POST /x402/permissions`` with an existing delegation (never retried).

        With ``resource_url`` it asks for a v3 token: single use, bound to the agent, the URL and
        the verb (WIRE.md §3.1). The three travel together; a service that predates v3 answers
        with a v2 token, so callers check the nonce of what came back.
        """
        if not delegation_id.strip():
            raise ValueError("a delegationId is required")
        extra: dict[str, Any] = {"agentId": agent_id} if agent_id else {}
        body: dict[str, Any] = {
            "accepted": {
                "scheme": scheme,
                "network": network or default_network(scheme, self.environment),
                "planId": plan_id,
                "extra": extra,
            },
            "delegationConfig": {"delegationId": delegation_id},
        }
        if resource_url is not None:
            if not resource_url.strip() or not http_verb.strip():
                raise ValueError("a bound token needs a resource URL and an HTTP verb")
            extra["httpVerb"] = http_verb.strip().upper()
            body["resource"] = {"url": resource_url}
            body["tokenVersion"] = 3
        data = await self._request("POST", "x402/permissions", body=body)
        return require_str(data, "accessToken")

    async def get_access_token(
        self,
        plan_id: str,
        *,
        agent_id: str | None = None,
        payment_type: str = "crypto",
        payment_method_id: str | None = None,
        spending_limit_cents: int = 10000,
        duration_secs: int = 7 * 24 * 3600,
        resource_url: str | None = None,
        http_verb: str = "POST",
        max_transactions: int | None = None,
    ) -> str:
        """The create-first flow (a v3 token bound to ``resource_url`` and ``http_verb`` when a
        URL is given); with ``max_transactions``, on a delegation of its own (WIRE.md §6)."""
        fiat = payment_type == "fiat"
        scheme: Scheme = SCHEME_CARD if fiat else SCHEME_CRYPTO
        network: str | None = None
        if fiat:
            cards = [m for m in await self.list_payment_methods() if m.is_card]
            card = pick_card(cards, payment_method_id)
            network = card.provider if card.provider in CARD_PROVIDERS else "stripe"
            provider, currency, card_id = network, "usd", card.id
        else:
            provider, currency, card_id = "erc4337", "usdc", None
        limit, most = spending_limit_cents, max_transactions

        async def mint(delegation: Delegation) -> str:
            return await self.create_access_token(
                plan_id,
                delegation.delegation_id,
                agent_id=agent_id,
                scheme=scheme,
                network=network,
                resource_url=resource_url,
                http_verb=http_verb,
            )

        pool = self._delegations
        return await pool.mint(provider, currency, card_id, limit, duration_secs, mint, most)

    @staticmethod
    def decode_access_token(token: str) -> dict[str, Any] | None:
        return decode_access_token(token)

    # -- facilitator -------------------------------------------------------------------------

    async def verify(
        self,
        payment_required: PaymentRequirement,
        token: str,
        max_amount: int | None = None,
        *,
        envelope_json: bytes | None = None,
    ) -> VerifyResult:
        """A dry run (reserves nothing); without ``max_amount`` the service picks the plan's.
        ``envelope_json``: ``payment_required.wire_json()``, when the caller keeps it."""
        body = facilitator_body(envelope_json or payment_required.wire_json(), token, max_amount)
        ok = await self._request("POST", "x402/verify", data=body, retry=True, model=VerifyResult)
        return cast(VerifyResult, ok)

    async def settle(
        self,
        payment_required: PaymentRequirement,
        token: str,
        max_amount: int | None,
        agent_request_id: str | None,
        *,
        envelope_json: bytes | None = None,
        within: float | None = None,
    ) -> SettleResult:
        """Burn credits. Retried only with an ``agentRequestId`` (idempotent on it).
        ``envelope_json`` as for :meth:`verify`; ``within``: the call ends within that long."""
        wire = envelope_json or payment_required.wire_json()
        body = facilitator_body(wire, token, max_amount, agent_request_id)
        send = functools.partial(self._request, "POST", "x402/settle", data=body, within=within)
        return cast(SettleResult, await send(retry=bool(agent_request_id), model=SettleResult))

    async def get_versions(self, *, auth: bool = True) -> VersionInfo:
        data = await self._request("GET", "meta/versions", auth=auth, retry=True)
        return parse_model(VersionInfo, data)


JS_MAX_SAFE_INTEGER = 2**53 - 1


def _sdk_int(value: int) -> int | str:
    """A JSON number, or a decimal string beyond 2**53 (the service parses numbers in JS)."""
    return value if -JS_MAX_SAFE_INTEGER <= value <= JS_MAX_SAFE_INTEGER else str(value)
