"""Checking a plan registration body (WIRE.md §2.4) into the document the sandbox stores.

Amounts and credits are kept as decimal strings (uint256 does not fit SQLite's INTEGER);
the rules mirror SPEC.md's credits shapes and the $1.00 fiat minimum.
"""

from __future__ import annotations

import secrets
from typing import Any

from ..encoding import ZERO_ADDRESS
from . import validation as v
from .errors import FIAT_PRICE_TOO_LOW, INVALID_CREDITS, INVALID_PRICE, ApiError, bad_request

FIAT_MINIMUM = 1_000_000  # $1.00 in 6-decimal units (WIRE.md §2.4)
MAX_RECEIVERS = 20
_METADATA_EXTRAS = (
    "author",
    "license",
    "integration",
    "sampleLink",
    "apiDescription",
    "dateCreated",
)
_PRICE_ADDRESSES = ("contractAddress", "feeController", "externalPriceAddress", "templateAddress")


def metadata(body: dict[str, Any], where: str) -> dict[str, Any]:
    """``metadataAttributes``: ``name`` required, the rest optional and type-checked."""
    meta = v.obj(body, "metadataAttributes", where)
    out: dict[str, Any] = {
        "name": v.req_text(meta, "name", f"{where}metadataAttributes.", max_len=256).strip(),
        "description": v.text(
            meta, "description", f"{where}metadataAttributes.", required=False, max_len=10_000
        )
        or "",
        "tags": v.str_list(meta, "tags", f"{where}metadataAttributes."),
    }
    for key in _METADATA_EXTRAS:
        value = v.text(meta, key, f"{where}metadataAttributes.", required=False)
        if value is not None:
            out[key] = value
    custom = meta.get("customData")
    if custom is not None:
        if not isinstance(custom, dict):
            raise bad_request(f"{where}metadataAttributes.customData must be an object")
        out["customData"] = custom
    return out


def _price(body: dict[str, Any], where: str) -> dict[str, Any]:
    price = v.obj(body, "priceConfig", where)
    at = f"{where}priceConfig."
    is_crypto = v.flag(price, "isCrypto", at, default=None)
    raw_amounts = price.get("amounts", [])
    raw_receivers = price.get("receivers", [])
    if not isinstance(raw_amounts, list) or not isinstance(raw_receivers, list):
        raise bad_request(f"{at}amounts and {at}receivers must be lists", code=INVALID_PRICE)
    if len(raw_amounts) != len(raw_receivers):
        raise bad_request(
            f"{at}amounts and {at}receivers must have the same length "
            f"({len(raw_amounts)} != {len(raw_receivers)})",
            "Give one receiver address per amount",
            code=INVALID_PRICE,
        )
    if len(raw_amounts) > MAX_RECEIVERS:
        raise bad_request(f"{at}amounts has more than {MAX_RECEIVERS} entries", code=INVALID_PRICE)
    amounts = [v.parse_bigint(a, f"{at}amounts[{i}]") for i, a in enumerate(raw_amounts)]
    receivers = [v.address(r, f"{at}receivers[{i}]") for i, r in enumerate(raw_receivers)]
    token = price.get("tokenAddress")
    currency = v.text(price, "currency", at, required=False, max_len=16)
    out: dict[str, Any] = {
        "isCrypto": is_crypto,
        "amounts": [str(a) for a in amounts],
        "receivers": receivers,
        "tokenAddress": ZERO_ADDRESS
        if token in (None, "")
        else v.address(token, f"{at}tokenAddress"),
    }
    for key in _PRICE_ADDRESSES:
        value = price.get(key)
        out[key] = ZERO_ADDRESS if value in (None, "") else v.address(value, f"{at}{key}")
    if currency:
        out["currency"] = currency
    total = sum(amounts)
    if not is_crypto and 0 < total < FIAT_MINIMUM:
        raise ApiError(
            400,
            FIAT_PRICE_TOO_LOW,
            f"Fiat price {total} is below the minimum of {FIAT_MINIMUM} ($1.00)",
            'Fiat amounts use 6-decimal units, not cents: $2.00 is "2000000"',
        )
    return out


def _credits(body: dict[str, Any], where: str) -> dict[str, Any]:
    credits = v.obj(body, "creditsConfig", where)
    at = f"{where}creditsConfig."
    fixed = v.flag(credits, "isRedemptionAmountFixed", at, default=None)
    redemption_type = v.bigint(credits, "redemptionType", at, high=4)
    duration = v.bigint(credits, "durationSecs", at, default=0)  # uint256, kept exact
    amount = v.bigint(credits, "amount", at)
    low = v.bigint(credits, "minAmount", at)
    high = v.bigint(credits, "maxAmount", at)
    if amount < 1:
        raise bad_request(f"{at}amount must be at least 1", code=INVALID_CREDITS)
    if not 1 <= low <= high:
        raise bad_request(
            f"{at}minAmount and maxAmount must satisfy 1 <= minAmount <= maxAmount",
            code=INVALID_CREDITS,
        )
    if fixed and low != high:
        raise bad_request(
            f"{at}minAmount must equal maxAmount when isRedemptionAmountFixed is true",
            "Fixed plans burn the same credits per request: set both to the credits per request",
            code=INVALID_CREDITS,
        )
    return {
        "isRedemptionAmountFixed": fixed,
        "redemptionType": redemption_type,
        "onchainMirror": v.flag(credits, "onchainMirror", at, default=False),
        "durationSecs": str(duration),
        "amount": str(amount),
        "minAmount": str(low),
        "maxAmount": str(high),
    }


def _access_limit(raw: object, duration: int, name: str) -> str:
    kind = "time" if duration > 0 else "credits"
    if raw is None:
        return kind
    if raw not in ("credits", "time"):
        raise bad_request(
            f"{name} must be 'credits' or 'time' (the kind of plan)",
            "To cap how many times the plan can be ordered, send maxOrders",
        )
    if raw == "time" and duration == 0:
        return "time"  # a non-expirable time plan (payments_py get_non_expirable_duration_config)
    if raw != kind:
        raise bad_request(
            f"{name} is {raw!r} but creditsConfig.durationSecs makes this a {kind} plan",
            code=INVALID_CREDITS,
        )
    return kind


def plan_document(
    body: dict[str, Any], *, where: str = "", standalone: bool = True
) -> dict[str, Any]:
    """Check a plan body and return what is stored.

    ``maxOrders`` is SPEC.md's "access limit" (the maximum number of orders, a decimal
    string); ``accessLimit`` stays WIRE.md's plan kind, ``credits`` or ``time``.
    ``standalone`` is false inside ``POST /protocol/agents/plans``, which has no nonce.
    """
    meta = metadata(body, where)
    raw_meta = body["metadataAttributes"]
    price = _price(body, where)
    credits = _credits(body, where)
    duration = int(credits["durationSecs"])
    access_limit = _access_limit(body.get("accessLimit"), duration, f"{where}accessLimit")
    if raw_meta.get("accessLimit") is not None:
        _access_limit(
            raw_meta.get("accessLimit"), duration, f"{where}metadataAttributes.accessLimit"
        )
    trial = v.flag(raw_meta, "isTrialPlan", f"{where}metadataAttributes.", default=False)
    if standalone:
        trial = v.flag(body, "isTrialPlan", where, default=False) or trial
    max_orders = body.get("maxOrders")
    currency = v.text(body, "currency", where, required=False, max_len=16) or price.get("currency")
    return {
        "metadata": meta,
        "price": price,
        "credits": credits,
        "isTrialPlan": trial,
        "accessLimit": access_limit,
        "maxOrders": None
        if max_orders is None
        else str(v.parse_bigint(max_orders, f"{where}maxOrders", low=1, high=2**63 - 1)),
        "nonce": str(v.bigint(body, "nonce", where, default=secrets.randbits(128)))
        if standalone
        else str(secrets.randbits(128)),
        "currency": currency,
    }
