"""Plans: storage, lookup and the plan object clients read (WIRE.md §2.1).

A plan id is the decimal string of a random 64-bit positive integer, because SPEC.md types
plan ids as strings while the DELETE association path types them as integers.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from ..encoding import ZERO_ADDRESS
from .db import Row, Store
from .errors import plan_not_found
from .tokens import contract_address
from .validation import Paging

#: Tokens whose symbol and decimals the sandbox knows (test and main network USDC/EURC).
KNOWN_TOKENS: dict[str, tuple[str, int]] = {
    ZERO_ADDRESS: ("ETH", 18),
    "0x036cbd53842c5426634e7929541ec2318f3dcf7e": ("USDC", 6),
    "0x833589fcd6edb6e08f4c7c32d4f71b54bda02913": ("USDC", 6),
    "0x808456652fdb597867f38412077a9182bf77359f": ("EURC", 6),
    "0x60a3e35cc302bfa44cb288bc5a4f316fdb1adb42": ("EURC", 6),
}
_FIAT_SYMBOLS = {"USD": "$", "EUR": "€"}


def iso(timestamp: float) -> str:
    """An ISO-8601 UTC time with milliseconds, the way the hosted service writes times."""
    moment = datetime.fromtimestamp(timestamp, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


@dataclass(frozen=True)
class Plan:
    """A registered plan; ``doc`` is what :func:`plan_input.plan_document` produced."""

    id: str
    owner: str
    doc: dict[str, Any]
    orders_count: int
    created_at: float

    @classmethod
    def from_row(cls, row: Row) -> Plan:
        return cls(
            row["id"], row["owner"], json.loads(row["doc"]), row["orders_count"], row["created_at"]
        )

    @property
    def name(self) -> str:
        return str(self.doc["metadata"]["name"])

    @property
    def is_crypto(self) -> bool:
        return bool(self.doc["price"]["isCrypto"])

    @property
    def is_trial(self) -> bool:
        return bool(self.doc["isTrialPlan"])

    @property
    def duration_secs(self) -> int:
        return int(self.doc["credits"]["durationSecs"])

    @property
    def is_time(self) -> bool:
        """A time plan grants access, not credits; ``durationSecs`` 0 means it never lapses
        (the SDK's ``get_non_expirable_duration_config`` with ``accessLimit: "time"``)."""
        return self.doc.get("accessLimit") == "time" or self.duration_secs > 0

    @property
    def kind(self) -> str:
        return "time" if self.is_time else "credits"

    @property
    def credits_amount(self) -> int:
        return int(self.doc["credits"]["amount"])

    @property
    def min_amount(self) -> int:
        return int(self.doc["credits"]["minAmount"])

    @property
    def max_amount(self) -> int:
        return int(self.doc["credits"]["maxAmount"])

    @property
    def max_orders(self) -> int | None:
        raw = self.doc.get("maxOrders")
        return None if raw is None else int(raw)

    @property
    def total_price(self) -> int:
        return sum(int(a) for a in self.doc["price"]["amounts"])

    @property
    def scheme(self) -> str:
        """The x402 scheme a token for this plan must use (WIRE.md §7)."""
        return "svc:erc4337" if self.is_crypto else "svc:card-delegation"

    @property
    def credits_contract(self) -> str:
        return contract_address(f"credits:{self.id}")

    def unit(self) -> tuple[str, int]:
        """The price's currency label and decimals."""
        price = self.doc["price"]
        if not self.is_crypto:
            return str(self.doc.get("currency") or "USD").upper(), 6
        token = str(price["tokenAddress"]).lower()
        if token in KNOWN_TOKENS:
            return KNOWN_TOKENS[token]
        return str(self.doc.get("currency") or "USDC").upper(), 6

    def price_text(self) -> str:
        """``"1 USDC"``, ``"$2.00"`` or ``"Free"``."""
        total = self.total_price
        if total == 0:
            return "Free"
        label, decimals = self.unit()
        value = Decimal(total).scaleb(-decimals)
        if not self.is_crypto:
            symbol = _FIAT_SYMBOLS.get(label)
            return f"{symbol}{value:.2f}" if symbol else f"{value:.2f} {label}"
        return f"{format(value.normalize(), 'f')} {label}"

    def price_per_credit(self) -> float:
        _, decimals = self.unit()
        return float(Decimal(self.total_price).scaleb(-decimals) / self.credits_amount)


def new_plan_id(store: Store) -> str:
    while True:
        candidate = str(secrets.randbelow(2**64 - 1) + 1)
        if store.one("SELECT 1 FROM plans WHERE id = ?", (candidate,)) is None:
            return candidate


def insert_plan(store: Store, owner: str, doc: dict[str, Any]) -> str:
    plan_id = new_plan_id(store)
    with store.tx():
        store.run(
            "INSERT INTO plans (id, owner, name, doc, created_at) VALUES (?, ?, ?, ?, ?)",
            (plan_id, owner, doc["metadata"]["name"], json.dumps(doc), store.now()),
        )
    return plan_id


def get_plan(store: Store, plan_id: str) -> Plan | None:
    row = store.one("SELECT * FROM plans WHERE id = ?", (plan_id,))
    return None if row is None else Plan.from_row(row)


def require_plan(store: Store, plan_id: str) -> Plan:
    plan = get_plan(store, plan_id)
    if plan is None:
        raise plan_not_found(plan_id)
    return plan


def order_clause(paging: Paging, table: str) -> str:
    direction = "DESC" if paging.descending else "ASC"
    if paging.sort_by == "name":
        return f"{table}.name COLLATE NOCASE {direction}, {table}.rowid {direction}"
    return f"{table}.created_at {direction}, {table}.rowid {direction}"


def list_plans(store: Store, owner: str, paging: Paging) -> tuple[int, list[Plan]]:
    total_row = store.one("SELECT COUNT(*) AS n FROM plans WHERE owner = ?", (owner,))
    rows = store.all(
        f"SELECT * FROM plans WHERE owner = ? ORDER BY {order_clause(paging, 'plans')} "
        "LIMIT ? OFFSET ?",
        (owner, paging.size, paging.skip),
    )
    return (int(total_row["n"]) if total_row else 0), [Plan.from_row(r) for r in rows]


def plan_view(plan: Plan) -> dict[str, Any]:
    """The plan object of ``GET /protocol/plans/{planId}`` (big integers as strings)."""
    main = dict(plan.doc["metadata"])
    main["price"] = plan.price_text()
    label, _ = plan.unit()
    plan_meta: dict[str, Any] = {
        "accessLimit": plan.doc["accessLimit"],
        "currency": label,
        "isTrialPlan": plan.is_trial,
        "maxOrders": plan.doc.get("maxOrders"),
    }
    if not plan.is_crypto:
        plan_meta["fiatPaymentProvider"] = "stripe"
    return {
        "id": plan.id,
        "planId": plan.id,
        "owner": plan.owner,
        "orgId": plan.doc.get("orgId"),
        "metadata": {"main": main, "plan": plan_meta},
        "registry": {
            "owner": plan.owner,
            "price": dict(plan.doc["price"]),
            "credits": dict(plan.doc["credits"]),
            "nftAddress": plan.credits_contract,
        },
        "ordersCount": plan.orders_count,
        "createdAt": iso(plan.created_at),
    }
