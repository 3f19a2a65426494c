"""Pydantic wire models: what the service sends back, and the configs we send.

Answers ignore unknown fields (additive changes are not version-gated). Big integers are read
from a decimal string or a number and written as decimal strings (WIRE.md §1.4).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    SecretStr,
    field_validator,
)
from pydantic.alias_generators import to_camel

from ..encoding import ZERO_ADDRESS, big_int

BigInt = Annotated[int, BeforeValidator(big_int), PlainSerializer(str, return_type=str)]
Scheme = Literal["svc:erc4337", "svc:card-delegation"]
SCHEME_CRYPTO: Scheme = "svc:erc4337"
SCHEME_CARD: Scheme = "svc:card-delegation"


class WireModel(BaseModel):
    """Base: camelCase on the wire, unknown fields ignored."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", defer_build=True
    )

    def wire(self) -> dict[str, Any]:
        """The JSON body form: camelCase, big ints as strings, ``None`` left out."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


# -- what we send ----------------------------------------------------------------------------


class PriceConfig(WireModel):
    is_crypto: bool
    amounts: list[BigInt] = Field(default_factory=list)
    receivers: list[str] = Field(default_factory=list)
    token_address: str = ZERO_ADDRESS
    contract_address: str = ZERO_ADDRESS
    fee_controller: str = ZERO_ADDRESS
    external_price_address: str = ZERO_ADDRESS
    template_address: str = ZERO_ADDRESS
    currency: str | None = None

    @field_validator("currency")
    @classmethod
    def _iso_upper(cls, value: str | None) -> str | None:
        """ISO-4217 (``USD``) and token symbols (``EURC``) go out upper case, as the SDK sends."""
        return value.strip().upper() if value else None


class CreditsConfig(WireModel):
    is_redemption_amount_fixed: bool
    redemption_type: int = 4
    onchain_mirror: bool = False
    duration_secs: BigInt = 0
    amount: BigInt
    min_amount: BigInt
    max_amount: BigInt


class AgentMetadata(WireModel):
    name: str
    description: str | None = None
    author: str | None = None
    license: str | None = None
    tags: list[str] | None = None
    integration: str | None = None
    sample_link: str | None = None
    api_description: str | None = None
    date_created: str | None = None


class PlanMetadata(AgentMetadata):
    is_trial_plan: bool = False
    """Always sent (``false`` by default), as the SDK sends it."""

    @field_validator("is_trial_plan", mode="before")
    @classmethod
    def _none_is_false(cls, value: object) -> object:
        return False if value is None else value


class AgentApi(WireModel):
    endpoints: list[dict[str, str]] | None = None
    """``[{"POST": url}]``: the shape the service matches (the SDK's ``{verb, url}`` model is
    a known SDK bug, payments-py#274). ``None`` (absent) allows every endpoint."""
    open_endpoints: list[str] | None = None
    agent_definition_url: str | None = None
    auth_type: str = "none"


# -- what we read ----------------------------------------------------------------------------


class PlanMain(WireModel):
    name: str = ""
    description: str | None = None
    price: str | None = None
    tags: list[str] = Field(default_factory=list)


class PlanInfo(WireModel):
    access_limit: str | None = None
    currency: str | None = None
    fiat_payment_provider: str | None = None
    is_trial_plan: bool = False
    max_orders: BigInt | None = None


class PlanMetadataRead(WireModel):
    main: PlanMain = Field(default_factory=PlanMain)
    plan: PlanInfo = Field(default_factory=PlanInfo)


class PriceRead(WireModel):
    is_crypto: bool | None = None
    amounts: list[BigInt] = Field(default_factory=list)
    receivers: list[str] = Field(default_factory=list)
    token_address: str | None = None


class CreditsRead(WireModel):
    amount: BigInt = 0
    min_amount: BigInt = 1
    max_amount: BigInt = 1
    duration_secs: BigInt = 0
    is_redemption_amount_fixed: bool | None = None
    nft_address: str | None = None


class Registry(WireModel):
    owner: str | None = None
    price: PriceRead = Field(default_factory=PriceRead)
    credits: CreditsRead = Field(default_factory=CreditsRead)
    plans: list[str] = Field(default_factory=list)
    #: the plan's credits contract (ERC-1155; the plan id is the token id), when named
    nft_address: str | None = None


class Plan(WireModel):
    id: str = Field(default="", validation_alias=AliasChoices("id", "planId"))
    """An agent's plan items may carry only ``planId``; either names the plan."""
    owner: str | None = None
    metadata: PlanMetadataRead = Field(default_factory=PlanMetadataRead)
    registry: Registry = Field(default_factory=Registry)

    @property
    def name(self) -> str:
        return self.metadata.main.name or self.id

    @property
    def is_crypto(self) -> bool:
        """Only an explicit ``isCrypto: false`` makes a card plan (WIRE.md §7)."""
        return self.registry.price.is_crypto is not False

    @property
    def scheme(self) -> Scheme:
        return SCHEME_CRYPTO if self.is_crypto else SCHEME_CARD

    @property
    def price_total(self) -> int:
        return sum(self.registry.price.amounts)

    @property
    def is_time_plan(self) -> bool:
        return self.registry.credits.duration_secs > 0

    @property
    def is_trial(self) -> bool:
        return self.metadata.plan.is_trial_plan


class PlanPage(WireModel):
    total: int = 0
    page: int = 1
    offset: int = 0
    plans: list[Plan] = Field(default_factory=list)


class Agent(WireModel):
    id: str
    owner: str | None = None
    metadata: PlanMetadataRead = Field(default_factory=PlanMetadataRead)
    registry: Registry = Field(default_factory=Registry)
    endpoints: list[dict[str, str]] = Field(default_factory=list)

    @property
    def name(self) -> str:
        return self.metadata.main.name or self.id


class AgentPage(WireModel):
    total: int = 0
    page: int = 1
    offset: int = 0
    agents: list[Agent] = Field(default_factory=list)


class PlanBalance(WireModel):
    plan_id: str | None = None
    plan_name: str | None = None
    plan_type: str | None = None
    holder_address: str | None = None
    balance: BigInt = 0
    is_subscriber: bool = False
    price_per_credit: float | None = None


class OrderResult(WireModel):
    success: bool = False
    tx_hash: str | None = None
    message: str | None = None


class FiatCheckout(WireModel):
    checkout_url: str
    session_id: str | None = None

    @classmethod
    def from_answer(cls, body: dict[str, Any]) -> FiatCheckout | None:
        """Read the checkout URL from every field name the SDKs use (WIRE.md §2.3)."""
        result = body.get("result") if isinstance(body.get("result"), dict) else {}
        assert isinstance(result, dict)
        for candidate in (
            result.get("checkoutLink"),
            result.get("checkoutUrl"),
            body.get("checkoutUrl"),
            body.get("checkoutLink"),
        ):
            if isinstance(candidate, str) and candidate.startswith(("https://", "http://")):
                session = result.get("stripeCheckoutSessionId") or body.get("sessionId")
                return cls(checkout_url=candidate, session_id=session)
        return None


class RegisteredIds(WireModel):
    agent_id: str | None = None
    plan_id: str | None = None


class Delegation(WireModel):
    delegation_id: str
    provider: str | None = None
    expires_at: float | None = None


class PaymentMethod(WireModel):
    """An enrolled payment method; only ``id`` is certain (non-card methods have no
    ``type``/``brand``/expiry, as in the SDK's ``PaymentMethodSummary``)."""

    id: str
    type: str | None = None
    brand: str | None = None
    last4: str | None = None
    exp_month: int | None = None
    exp_year: int | None = None
    alias: str | None = None
    provider: str | None = None
    status: str | None = None

    @property
    def is_card(self) -> bool:
        return self.type == "card"

    @property
    def expiry(self) -> str | None:
        """``MM/YYYY``, or ``None`` for a method without an expiry."""
        if not self.exp_month or not self.exp_year:
            return None
        return f"{self.exp_month:02d}/{self.exp_year}"


# -- x402 ------------------------------------------------------------------------------------


class Resource(WireModel):
    url: str = ""
    description: str | None = None
    mime_type: str | None = None


class Accept(WireModel):
    """One ``accepts[]`` entry: the service's own fields (``scheme``, ``network``, ``planId``,
    ``extra``) and x402 v2's price terms (``amount``, ``asset``, ``payTo``,
    ``maxTimeoutSeconds``), which only buyers see (:meth:`PaymentRequirement.x402`)."""

    scheme: str
    network: str
    plan_id: str
    extra: dict[str, Any] = Field(default_factory=lambda: {"version": "1"})
    amount: BigInt | None = None
    asset: str | None = None
    pay_to: str | None = None
    max_timeout_seconds: int | None = None


class PaymentRequirement(WireModel):
    """The x402 v2 PaymentRequired envelope.

    Two renderings: :meth:`x402` is what buyers read (the ``payment-required`` header, an MCP
    tool's ``structuredContent``), :meth:`wire` what verify and settle send the service,
    exactly the SDK's form (without x402's price terms, which the SDK does not send)."""

    x402_version: int = Field(default=2, alias="x402Version")
    error: str | None = None
    resource: Resource = Field(default_factory=Resource)
    accepts: list[Accept] = Field(default_factory=list)
    extensions: dict[str, Any] = Field(default_factory=dict)

    def wire(self) -> dict[str, Any]:
        """As the SDK sends it to verify and settle (``model_dump(by_alias=True)``): optional
        envelope fields travel as ``null`` rather than being left out, and the entries carry
        only the SDK's fields (``scheme``, ``network``, ``planId``, ``extra``)."""
        accepts = []
        for accept in self.accepts:
            extra = {"version": None, "agentId": None, "httpVerb": None, **accept.extra}
            accepts.append(
                {
                    "scheme": accept.scheme,
                    "network": accept.network,
                    "planId": accept.plan_id,
                    "extra": extra,
                }
            )
        return {
            "x402Version": self.x402_version,
            "error": self.error,
            "resource": {
                "url": self.resource.url,
                "description": self.resource.description,
                "mimeType": self.resource.mime_type,
            },
            "accepts": accepts,
            "extensions": dict(self.extensions),
        }

    def wire_json(self) -> bytes:
        """:meth:`wire` as compact JSON (the ``paymentRequired`` of a verify or settle body)."""
        return json.dumps(self.wire(), separators=(",", ":")).encode()

    def x402(self) -> dict[str, Any]:
        """As buyers read it: x402 v2's PaymentRequired, each entry with its price terms and
        the service's own fields, absent optional fields left out (as x402's reference SDKs
        encode it)."""
        accepts: list[dict[str, Any]] = []
        for accept in self.accepts:
            entry: dict[str, Any] = {"scheme": accept.scheme, "network": accept.network}
            terms = {
                "asset": accept.asset,
                "amount": None if accept.amount is None else str(accept.amount),
                "payTo": accept.pay_to,
                "maxTimeoutSeconds": accept.max_timeout_seconds,
            }
            entry.update((key, value) for key, value in terms.items() if value is not None)
            entry["planId"] = accept.plan_id
            entry["extra"] = {k: v for k, v in accept.extra.items() if v is not None}
            accepts.append(entry)
        resource: dict[str, Any] = {"url": self.resource.url}
        if self.resource.description is not None:
            resource["description"] = self.resource.description
        if self.resource.mime_type is not None:
            resource["mimeType"] = self.resource.mime_type
        envelope: dict[str, Any] = {"x402Version": self.x402_version}
        if self.error is not None:
            envelope["error"] = self.error
        envelope.update(resource=resource, accepts=accepts, extensions=dict(self.extensions))
        return envelope

    def settle_failure(self, reason: str) -> dict[str, Any]:
        """x402's ``payment-response`` for a settle that did not pay: ``success`` false, the
        reason, no transaction, the network of the first entry."""
        network = self.accepts[0].network if self.accepts else ""
        return {"success": False, "errorReason": reason, "transaction": "", "network": network}


class VerifyResult(WireModel):
    is_valid: bool = False
    invalid_reason: str | None = None
    payer: str | None = None
    network: str | None = None
    agent_request_id: str | None = None
    agent_request: dict[str, Any] | None = None

    @property
    def request_id(self) -> str | None:
        """``agentRequest.agentRequestId``, else ``agentRequestId`` (WIRE.md §4)."""
        nested = (self.agent_request or {}).get("agentRequestId")
        return str(nested) if nested else self.agent_request_id


class SettleResult(WireModel):
    success: bool = False
    error_reason: str | None = None
    payer: str | None = None
    network: str | None = None
    transaction: str = ""
    credits_redeemed: BigInt | None = None
    remaining_balance: BigInt | None = None
    order_tx: str | None = None

    def receipt(self) -> dict[str, Any]:
        """The ``payment-response`` receipt fields (SPEC.md, big ints as strings)."""
        return {
            "success": self.success,
            "transaction": self.transaction,
            "network": self.network or "",
            "payer": self.payer or "",
            "creditsRedeemed": str(self.credits_redeemed or 0),
            "remainingBalance": str(self.remaining_balance or 0),
        }


@dataclass(frozen=True)
class Onboarded:
    """A white-label customer the organization onboarded (the key is never shown)."""

    api_key: SecretStr | None
    address: str | None
    consent_required: bool = False


class VersionInfo(WireModel):
    current: str
    floor: str
    gated_versions: list[str] = Field(default_factory=list)
    your_pinned_version: str | None = None
    your_effective_version: str | None = None
    your_version_resolved_from: str | None = None
