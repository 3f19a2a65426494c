"""Seeding a sandbox database with settle history, fast, for benchmarks and soak tests.

:func:`seed_settles` writes ``n`` settles straight through the ledger functions (the same
code a real settle runs: a balance-row update, an audit row, a settled agent request), in
one transaction, so a benchmark can compare a fresh database with one that has a long
history without sending ``n`` HTTP requests first.

    from svc_gateway.sandbox.seed import seed_settles
    seeded = seed_settles("/tmp/bench.db", 50_000)
    # start_sandbox(db="/tmp/bench.db") then verify+settle with seeded["buyer"]["apiKey"],
    # seeded["owner"]["apiKey"], seeded["planId"], seeded["delegationId"]
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from .accounts import create_account
from .db import Store, is_memory
from .delegations import create_delegation
from .ledger import burn, grant
from .plan_input import plan_document
from .plans import insert_plan, require_plan
from .tokens import time_ordered_uuid, tx_hash

USDC = "0x036CbD53842c5426634e7929541eC2318f3dCF7e"


def plan_body(owner: str, *, name: str = "Seeded plan", credits: int = 100) -> dict[str, Any]:
    """A fixed-credits USDC plan body (1 USDC, ``credits`` credits, 1 per request), as the REST
    API takes it; the benchmarks register the same plan over HTTP."""
    return {
        "metadataAttributes": {"name": name},
        "priceConfig": {
            "tokenAddress": USDC,
            "amounts": ["1000000"],
            "receivers": [owner],
            "isCrypto": True,
        },
        "creditsConfig": {
            "isRedemptionAmountFixed": True,
            "redemptionType": 4,
            "onchainMirror": False,
            "durationSecs": "0",
            "amount": str(credits),
            "minAmount": "1",
            "maxAmount": "1",
        },
    }


def envelope(plan_id: str) -> dict[str, Any]:
    """The PaymentRequired envelope a seller of the seeded plan verifies and settles against."""
    return {
        "x402Version": 2,
        "resource": {"url": ""},
        "accepts": [
            {
                "scheme": "svc:erc4337",
                "network": "eip155:84532",
                "planId": plan_id,
                "extra": {"version": "1"},
            }
        ],
        "extensions": {},
    }


def seed_settles(
    db_path: str,
    n: int,
    *,
    spare_credits: int = 1_000_000,
    clock: Callable[[], float] = time.time,
) -> dict[str, Any]:
    """Create an owner, a buyer, a 1-credit-per-request crypto plan and an erc4337
    delegation in ``db_path``, grant the buyer ``n + spare_credits`` credits and record
    ``n`` settled requests of 1 credit each.

    Returns ``{"planId", "delegationId", "owner": {"apiKey", "address"}, "buyer": {...},
    "settles": n}``; the buyer keeps ``spare_credits`` credits for the benchmark itself.
    """
    if n < 0 or spare_credits < 0:
        raise ValueError("n and spare_credits must be >= 0")
    store = Store(db_path, clock=clock)
    try:
        owner = create_account(store, "seed-owner")
        buyer = create_account(store, "seed-buyer")
        plan_id = insert_plan(store, owner["address"], plan_document(plan_body(owner["address"])))
        plan = require_plan(store, plan_id)
        delegation_id = create_delegation(
            store,
            buyer["address"],
            {
                "provider": "erc4337",
                "spendingLimitCents": "100000000",
                "durationSecs": str(30 * 24 * 3600),
                "currency": "usdc",
            },
        )
        grant(store, plan, buyer["address"], n + spare_credits, "seed", None)
        now = store.now()
        with store.tx():
            for i in range(n):
                request_id = time_ordered_uuid(now - n + i)
                tx = burn(store, plan, buyer["address"], 1, request_id)
                answer = {
                    "success": True,
                    "payer": buyer["address"],
                    "network": "eip155:84532",
                    "transaction": tx,
                    "creditsRedeemed": "1",
                }
                store.run(
                    "INSERT INTO agent_requests (id, token_id, plan_id, payer, created_at, "
                    "expires_at, answer) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        request_id,
                        tx_hash()[2:34],
                        plan_id,
                        buyer["address"],
                        now,
                        now + store.request_ttl_secs,
                        json.dumps(answer),
                    ),
                )
        if not is_memory(db_path):  # fold the big write into the file, as a long-lived DB has
            store.run("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        store.close()
    return {
        "planId": plan_id,
        "delegationId": delegation_id,
        "owner": owner,
        "buyer": buyer,
        "settles": n,
    }
