"""payments-py's own A2A client (``PaymentsClient``, a2a-sdk 0.3) paying one message: a script.

Runs in the environment that has payments-py (the test extra, which pins a2a-sdk < 0.4), as a
subprocess of the A2A tests (tests/e2e/a2a/test_payments_py.py), which run on a2a-sdk 1.x. The SDK
reaches the sandbox on loopback through the conformance tests' brand shim; its A2A client posts to
the seller's JSON-RPC URL as it always does (``message/stream`` with the ``payment-signature``
header, a minimal card, no card fetch).

    python -m tests.e2e.a2a.payments_py_buyer '{"origin": …, "apiKey": …, "planId": …,
                                             "agentId": …, "url": …, "prompt": …}'

Prints one JSON object: every event the client yielded, in 0.3 JSON (``{"task": …,
"update": …}`` or ``{"message": …}``).
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from typing import Any

import pytest
from a2a.types import Message, MessageSendParams, Part, Role, TextPart
from payments_py.a2a.payments_client import PaymentsClient
from payments_py.x402.types import DelegationConfig

from tests.conformance.conftest import Recorder, crypto_delegation, payments_for, point_sdk_at


def _dump(item: Any) -> dict[str, Any]:
    if isinstance(item, tuple):
        task, update = item
        return {
            "task": task.model_dump(mode="json", by_alias=True, exclude_none=True),
            "update": None
            if update is None
            else update.model_dump(mode="json", by_alias=True, exclude_none=True),
        }
    return {"message": item.model_dump(mode="json", by_alias=True, exclude_none=True)}


async def buy(args: dict[str, Any]) -> list[dict[str, Any]]:
    payments = payments_for(args["apiKey"])
    delegation = await asyncio.to_thread(crypto_delegation, payments)
    client = PaymentsClient(
        agent_base_url=args["url"],
        payments=payments,
        agent_id=args["agentId"],
        plan_id=args["planId"],
        delegation_config=DelegationConfig(delegation_id=delegation),
    )
    message = Message(
        role=Role.user,
        message_id=str(uuid.uuid4()),
        parts=[Part(root=TextPart(text=args["prompt"]))],
    )
    stream = client.send_message_stream(MessageSendParams(message=message))
    return [_dump(item) async for item in stream]


def main() -> None:
    args = json.loads(sys.argv[1])
    with pytest.MonkeyPatch.context() as mp:
        point_sdk_at(mp, args["origin"], Recorder())
        events = asyncio.run(buy(args))
    print(json.dumps({"events": events}))


if __name__ == "__main__":
    main()
