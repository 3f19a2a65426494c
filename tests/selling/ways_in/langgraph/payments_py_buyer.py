"""payments-py's own subscriber (a ``Payments`` instance getting an x402 token) paying a run of
our LangGraph gate: a script.

Runs in the environment that has payments-py (the test extra; payments-py[langsmith] pins
starlette < 0.50, which this folder's LangGraph cannot use), as a subprocess of
``test_buyers.py``. The SDK reaches the sandbox through the conformance tests' brand shim.

    python -m tests.selling.ways_in.langgraph.payments_py_buyer '{"origin": …, "apiKey": …,
        "planId": …, "agentId": …, "url": …}'

Prints one JSON object: the run's status, body and ``payment-response`` header.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
import requests
from payments_py.x402.types import DelegationConfig, X402TokenOptions

from tests.conformance.conftest import Recorder, crypto_delegation, payments_for, point_sdk_at


def buy(args: dict[str, Any]) -> dict[str, Any]:
    payments = payments_for(args["apiKey"])
    options = X402TokenOptions(
        delegation_config=DelegationConfig(delegation_id=crypto_delegation(payments))
    )
    minted = payments.x402.get_x402_access_token(
        args["planId"], args["agentId"], token_options=options
    )
    run = {"assistant_id": "echo", "input": {"message": "from payments-py"}}
    answer = requests.post(
        args["url"], json=run, headers={"payment-signature": minted["accessToken"]}, timeout=30
    )
    return {
        "status": answer.status_code,
        "body": answer.json(),
        "receipt": answer.headers.get("payment-response"),
    }


def main() -> None:
    args = json.loads(sys.argv[1])
    with pytest.MonkeyPatch.context() as mp:
        point_sdk_at(mp, args["origin"], Recorder())
        print(json.dumps(buy(args)))


if __name__ == "__main__":
    main()
