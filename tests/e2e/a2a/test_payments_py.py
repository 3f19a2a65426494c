"""Buyers on the old protocol: payments-py's own A2A client and a2a-sdk 0.3's client pay our 1.x
seller.

payments-py pins a2a-sdk < 0.4, so it cannot live in this environment: the seller runs here (the
market fixture, a2a-sdk 1.x) and the 0.3 clients run in the environment that has them
(``SVC_PAYMENTS_PY_PYTHON``, which CI sets to its main venv's interpreter), as a subprocess
driving ``tests/e2e/a2a/payments_py_buyer.py``. The ledger is the truth.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from svc_gateway.interop import a2a_x402 as x402

from .conftest import A2AMarket, MarketFactory

ROOT = Path(__file__).resolve().parents[3]


def payments_py_python() -> str:
    """The interpreter of the environment with payments-py (and its a2a-sdk 0.3)."""
    candidates = [os.environ.get("SVC_PAYMENTS_PY_PYTHON", ""), str(ROOT / ".ci-venv/bin/python")]
    for python in filter(None, candidates):
        probe = [python, "-c", "import payments_py.a2a.payments_client"]
        if Path(python).exists() and subprocess.run(probe, capture_output=True).returncode == 0:
            return python
    pytest.skip("no environment with payments-py (set SVC_PAYMENTS_PY_PYTHON)")


def buy_with_0_3_clients(market: A2AMarket, *runs: dict[str, Any]) -> list[Run]:
    """Each run (``url``, ``prompt``, ``client``…; see the script) in one subprocess, in
    order: the URL each 0.3 client posted to, and every event it yielded."""
    args = {
        "origin": market.sandbox.origin,
        "apiKey": market.subscriber_key,
        "planId": market.plan_id,
        "agentId": market.agent_id,
        "url": market.url,
        "runs": list(runs),
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
    printed = json.loads(done.stdout.strip().splitlines()[-1])
    return [Run(str(run["followed"]), run["events"]) for run in printed["runs"]]


@dataclass
class Run:
    followed: str
    events: list[dict[str, Any]]

    @property
    def status(self) -> dict[str, Any]:
        assert self.events, "the 0.3 client yielded nothing"
        last = self.events[-1]
        status: dict[str, Any] = (last.get("update") or last["task"])["status"]
        return status

    @property
    def text(self) -> str:
        return " ".join(p.get("text", "") for p in self.status["message"]["parts"])


async def test_0_3_clients_pay_the_json_rpc_interface_the_shared_ports_card_names(
    make_market: MarketFactory,
) -> None:
    """payments-py's ``PaymentsClient`` posting to the JSON-RPC URL it is given; then (issue
    43.1) on the paid endpoint's port, where the card's ``url`` is the JSON-RPC interface,
    a2a-sdk 0.3's client built from the card by its ``ClientFactory`` (unpaid, then paying in
    band on the parked task) and ``PaymentsClient`` given the card's ``url``: three answers,
    three credits."""
    market = await make_market(on_endpoint=True)
    token = await market.token()  # bound to the JSON-RPC interface: nowhere else takes it
    given, built, handed = await asyncio.to_thread(
        buy_with_0_3_clients,
        market,
        {"prompt": "how long is this old prompt"},
        {
            "client": "a2a-0.3",
            "url": market.agent.base,
            "token": token,
            "prompt": "four words from 0.3",
        },
        {"url": market.agent.base, "followCard": True, "prompt": "and from payments py"},
    )
    for run, words in ((given, 6), (built, 4), (handed, 4)):
        assert run.status["state"] == "completed", run.events
        assert f"{words} words" in run.text
        meta = run.status["message"]["metadata"]
        assert meta[x402.STATUS] == x402.PAYMENT_COMPLETED
        (receipt,) = meta[x402.RECEIPTS]
        assert receipt["success"] is True and receipt["creditsRedeemed"] == "1"
    assert built.followed == handed.followed == market.url
    first = built.events[0]["task"]["status"]  # the a2a-x402 flow: asked to pay first
    assert first["state"] == "input-required"
    assert first["message"]["metadata"][x402.STATUS] == x402.PAYMENT_REQUIRED
    assert await market.burned() == 3
