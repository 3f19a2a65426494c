"""Buyers on the old protocol: payments-py's own A2A client (a2a-sdk 0.3) pays our 1.x seller.

payments-py pins a2a-sdk < 0.4, so it cannot live in this environment: the seller runs here (the
market fixture, a2a-sdk 1.x) and payments-py's ``PaymentsClient`` runs in the environment that
has it (``SVC_PAYMENTS_PY_PYTHON``, which CI sets to its main venv's interpreter), as a
subprocess driving ``tests/e2e/a2a/payments_py_buyer.py``. The ledger is the truth.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from svc_gateway.interop import a2a_x402 as x402

from .conftest import A2AMarket

ROOT = Path(__file__).resolve().parents[3]


def payments_py_python() -> str:
    """The interpreter of the environment with payments-py (and its a2a-sdk 0.3)."""
    candidates = [os.environ.get("SVC_PAYMENTS_PY_PYTHON", ""), str(ROOT / ".ci-venv/bin/python")]
    for python in filter(None, candidates):
        probe = [python, "-c", "import payments_py.a2a.payments_client"]
        if Path(python).exists() and subprocess.run(probe, capture_output=True).returncode == 0:
            return python
    pytest.skip("no environment with payments-py (set SVC_PAYMENTS_PY_PYTHON)")


def buy_with_payments_py(market: A2AMarket, prompt: str) -> list[dict[str, Any]]:
    args = {
        "origin": market.sandbox.origin,
        "apiKey": market.subscriber_key,
        "planId": market.plan_id,
        "agentId": market.agent_id,
        "url": market.url,
        "prompt": prompt,
    }
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "plugin"), str(ROOT)])}
    done = subprocess.run(
        [payments_py_python(), "-m", "tests.e2e.a2a.payments_py_buyer", json.dumps(args)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    events: list[dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])["events"]
    return events


async def test_payments_py_a2a_client_pays_for_one_answer(market: A2AMarket) -> None:
    events = await asyncio.to_thread(buy_with_payments_py, market, "how long is this old prompt")
    assert events, "payments-py's client yielded nothing"
    last = events[-1]
    status = (last.get("update") or last["task"])["status"]
    assert status["state"] == "completed", events
    text = " ".join(p.get("text", "") for p in status["message"]["parts"])
    assert "6 words" in text
    meta = status["message"]["metadata"]
    assert meta[x402.STATUS] == x402.PAYMENT_COMPLETED
    (receipt,) = meta[x402.RECEIPTS]
    assert receipt["success"] is True and receipt["creditsRedeemed"] == "1"
    assert await market.burned() == 1
