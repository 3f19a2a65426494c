"""Accounts, their API keys and their enrolled payment methods.

An API key is ``local:<JWT>``; it authenticates only when its signature checks *and* its
``jti`` is on file, so a forged or hand-made key is refused even if it parses.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from ..encoding import is_address
from .db import Row, Store
from .errors import PAYMENT_METHOD_NOT_FOUND, ApiError, bad_request
from .tokens import new_address, random_hex, sign, verify
from .versioning import CURRENT, known_version, version_error

KEY_PREFIX = "local"
PAYMENT_PROVIDERS = ("stripe", "braintree", "visa", "vgs", "erc4337")


@dataclass(frozen=True)
class Account:
    """The caller behind a valid API key."""

    address: str
    jti: str
    pinned_version: str


def create_account(
    store: Store, label: str = "", api_version: str | None = None, *, kind: str = "owner"
) -> dict[str, str]:
    """A new account with one key (pinned to ``api_version`` or the current version).

    ``kind`` is ``owner`` for an account a person opens (it administers its own
    organization), ``customer`` or ``member`` for one an organization enrols.
    """
    pinned = CURRENT
    if api_version is not None:
        normalized = known_version(api_version)
        if normalized is None:
            raise version_error(api_version)
        pinned = normalized
    address = new_address()
    now = store.now()
    with store.tx():
        store.run(
            "INSERT INTO accounts (address, label, card_id, bt_card_id, kind, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (
                address,
                label,
                "pm_sandbox_" + random_hex(12),
                "bt_sandbox_" + random_hex(12),
                kind,
                now,
            ),
        )
        key = _issue_key(store, address, pinned, now)
    return {"apiKey": key, "address": address}


def issue_key(store: Store, address: str) -> str:
    """Another key for an existing account (pinned to the current version)."""
    return _issue_key(store, address, CURRENT, store.now())


def _issue_key(store: Store, address: str, pinned: str, now: float) -> str:
    jti = str(uuid.uuid4())
    claims = {"iss": address, "sub": address, "jti": jti, "iat": int(now), "o11y": "sandbox"}
    store.run(
        "INSERT INTO api_keys (jti, address, pinned_version, created_at) VALUES (?, ?, ?, ?)",
        (jti, address, pinned, now),
    )
    return f"{KEY_PREFIX}:{sign(claims, store.key_signing)}"


def authenticate(store: Store, authorization: str | None) -> Account | None:
    """The account of a ``Bearer local:<jwt>`` header, or ``None`` for anything else."""
    if not authorization:
        return None
    scheme, _, credential = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    prefix, sep, token = credential.strip().partition(":")
    if not sep or prefix.lower() != KEY_PREFIX:
        return None
    claims = verify(token, store.key_signing)
    if (
        claims is None
        or not isinstance(claims.get("jti"), str)
        or not is_address(claims.get("sub"))
    ):
        return None
    row = store.one(
        "SELECT address, pinned_version FROM api_keys WHERE jti = ? AND address = ?",
        (claims["jti"], str(claims["sub"]).lower()),
    )
    if row is None:
        return None
    return Account(address=row["address"], jti=claims["jti"], pinned_version=row["pinned_version"])


# -- payment methods (WIRE.md §6) ------------------------------------------------------------


def _card(row: Row) -> dict[str, Any]:
    """The Stripe test card (Visa 4242)."""
    return {
        "id": row["card_id"],
        "type": "card",
        "brand": "visa",
        "last4": "4242",
        "expMonth": 12,
        "expYear": 2030,
        "alias": row["card_alias"],
        "provider": "stripe",
        "status": "Active",
        "allowedApiKeyIds": None,
    }


def _braintree_card(row: Row) -> dict[str, Any]:
    """The Braintree test card (Braintree's sandbox Visa 4111 1111 1111 1111), vaulted."""
    return {
        "id": row["bt_card_id"],
        "type": "card",
        "brand": "visa",
        "last4": "1111",
        "expMonth": 12,
        "expYear": 2030,
        "alias": row["bt_alias"],
        "provider": "braintree",
        "status": "Active",
        "allowedApiKeyIds": None,
    }


def _wallet(row: Row) -> dict[str, Any]:
    return {
        "id": row["address"],
        "type": "crypto_wallet",
        "brand": "",
        "last4": "",
        "expMonth": 0,
        "expYear": 0,
        "alias": row["wallet_alias"],
        "provider": "erc4337",
        "status": "Active",
        "allowedApiKeyIds": None,
    }


def payment_methods(store: Store, address: str, provider: str | None) -> list[dict[str, Any]]:
    """The test cards (Stripe, Braintree) and the crypto wallet every account has,
    optionally filtered by provider."""
    if provider is not None and provider not in PAYMENT_PROVIDERS:
        raise bad_request(f"provider must be one of {', '.join(PAYMENT_PROVIDERS)}")
    row = store.one("SELECT * FROM accounts WHERE address = ?", (address,))
    if row is None:
        return []
    items = [_card(row), _braintree_card(row), _wallet(row)]
    return [i for i in items if provider is None or i["provider"] == provider]


def card_id(store: Store, address: str, provider: str = "stripe") -> str | None:
    """The id of the account's test card of ``provider`` (``stripe`` or ``braintree``)."""
    row = store.one("SELECT card_id, bt_card_id FROM accounts WHERE address = ?", (address,))
    if row is None:
        return None
    return str(row["bt_card_id"] if provider == "braintree" else row["card_id"])


def update_payment_method(
    store: Store, address: str, method_id: str, body: dict[str, Any]
) -> dict[str, Any]:
    """``PATCH /payment-methods/{id}``: the alias is kept; key scoping is accepted, not kept."""
    alias = body.get("alias")
    if alias is not None and (not isinstance(alias, str) or len(alias) > 100):
        raise bad_request("alias must be a string of at most 100 characters")
    allowed = body.get("allowedApiKeyIds")
    if allowed is not None and (
        not isinstance(allowed, list) or not all(isinstance(a, str) for a in allowed)
    ):
        raise bad_request("allowedApiKeyIds must be a list of strings or null")
    row = store.one("SELECT * FROM accounts WHERE address = ?", (address,))
    columns = (
        {}
        if row is None
        else {
            row["card_id"]: ("card_alias", _card),
            row["bt_card_id"]: ("bt_alias", _braintree_card),
            row["address"]: ("wallet_alias", _wallet),
        }
    )
    if method_id not in columns:
        raise ApiError(
            404,
            PAYMENT_METHOD_NOT_FOUND,
            "No such payment method on your account",
            "List yours with GET /payment-methods",
        )
    column, view = columns[method_id]
    if "alias" in body:
        with store.tx():
            store.run(f"UPDATE accounts SET {column} = ? WHERE address = ?", (alias, address))
    fresh = store.one("SELECT * FROM accounts WHERE address = ?", (address,))
    assert fresh is not None
    return view(fresh)
