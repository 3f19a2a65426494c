"""Buyers of a LangGraph deployment behind our gate: payments-py's own subscriber (in the
environment that has payments-py, as a subprocess) and our ``svc_queryAgent`` given the
deployment's ``/runs/wait`` URL (LangGraph's request shape, the run's output and the receipt).
The ledger is the truth."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from svc_gateway.encoding import decode_b64_json
from svc_gateway.selling.ways_in.langgraph import RouteConfig
from tests.conftest import HostFactory
from tests.support.sellers import Seller, SellerFactory

from .conftest import LangGraphServer, Sell
from .test_runs_wait import conserved

ROOT = Path(__file__).resolve().parents[4]


def payments_py_python() -> str:
    """The interpreter of the environment with payments-py (``SVC_PAYMENTS_PY_PYTHON``; CI sets
    it to its main venv's)."""
    candidates = [os.environ.get("SVC_PAYMENTS_PY_PYTHON", ""), str(ROOT / ".venv/bin/python")]
    for python in filter(None, candidates):
        probe = [python, "-c", "import payments_py.x402.types"]
        if Path(python).exists() and subprocess.run(probe, capture_output=True).returncode == 0:
            return python
    pytest.skip("no environment with payments-py (set SVC_PAYMENTS_PY_PYTHON)")


def sold(seller: Seller, sell: Sell) -> None:
    run = RouteConfig(plan_id=seller.fixed_plan, agent_id=seller.fixed_agent)
    sell(seller, {"POST /runs/wait": run, "POST /threads/{thread_id}/runs/wait": run})


async def test_payments_py_pays_a_run(
    make_seller: SellerFactory, sell: Sell, langgraph_server: LangGraphServer
) -> None:
    seller: Seller = await make_seller()
    sold(seller, sell)
    args = {
        "origin": seller.sandbox.origin,
        "apiKey": seller.buyer_key,
        "planId": seller.fixed_plan,
        "agentId": seller.fixed_agent,
        "url": langgraph_server.origin + "/runs/wait",
    }
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "plugin"), str(ROOT)])}
    module = "tests.selling.ways_in.langgraph.payments_py_buyer"
    # on this loop: the sandbox and the LangGraph server run on loops of their own
    proc = await asyncio.create_subprocess_exec(
        payments_py_python(),
        "-m",
        module,
        json.dumps(args),
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()[-4000:]
    answer = json.loads(out.decode().strip().splitlines()[-1])
    assert answer["status"] == 200
    assert answer["body"] == {"message": "from payments-py", "echo": "echo: from payments-py"}
    receipt = decode_b64_json(answer["receipt"])
    assert receipt is not None and receipt["creditsRedeemed"] == "2"
    assert (await conserved(seller, seller.fixed_plan))["burned"] == 2


async def test_svc_query_agent_pays_a_langgraph_run(
    make_seller: SellerFactory,
    make_host: HostFactory,
    sell: Sell,
    langgraph_server: LangGraphServer,
) -> None:
    url = langgraph_server.origin + "/runs/wait"
    seller: Seller = await make_seller(endpoints=lambda _origin: [{"POST": url}])
    sold(seller, sell)
    gateway, _handle = await make_host(seller.buyer_key)
    params: dict[str, Any] = {
        "agentUrl": url,
        "planId": seller.fixed_plan,
        "agentId": seller.fixed_agent,
        "assistantId": "echo",
        "arguments": {"message": "from svc"},
    }
    result = await gateway.call_tool("svc_queryAgent", params)
    data = result.structuredContent
    assert not result.isError, data
    assert data["answer"] == {"message": "from svc", "echo": "echo: from svc"}
    assert data["receipt"]["creditsRedeemed"] == "2"
    # without assistantId: the deployment's graphs are listed; several, so it asks which
    several = await gateway.call_tool("svc_queryAgent", {**params, "assistantId": None})
    assert several.isError and "assistantId" in several.structuredContent["error"]["hint"]
    assert '"echo"' in several.structuredContent["error"]["message"]
    assert (await conserved(seller, seller.fixed_plan))["burned"] == 2
