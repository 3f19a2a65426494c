"""A2A 0.3 buyers paying one message: payments-py's own A2A client (``PaymentsClient``) and
a2a-sdk 0.3's plain client, each in a script.

Runs in the environment that has payments-py (the test extra, which pins a2a-sdk < 0.4), as a
subprocess of the A2A tests (tests/e2e/a2a/test_payments_py.py), which run on a2a-sdk 1.x. The SDK
reaches the sandbox on loopback through the conformance tests' brand shim.

- ``"client": "payments-py"`` (the default): ``PaymentsClient`` posts to ``url`` as it always
  does (``message/stream`` with the ``payment-signature`` header, a minimal card, no card fetch);
  with ``"followCard": true`` it is given the ``url`` of the card a2a-sdk 0.3's ``A2ACardResolver``
  reads at ``url`` (the agent's origin), as a payments-py user starting from a card does.
- ``"client": "a2a-0.3"``: a2a-sdk 0.3's ``A2ACardResolver`` reads the card at ``url`` and its
  ``ClientFactory`` builds the client from it (the card's ``url`` and ``preferredTransport``);
  one blocking ``message/send`` without payment, then the follow-up on that task paying in band
  (``x402.payment.payload``: the decoded ``token``), as the a2a-x402 extension says.

    python -m tests.e2e.a2a.payments_py_buyer '{"origin": …, "apiKey": …, "planId": …,
                                             "agentId": …, "runs": [{"url": …, "prompt": …}]}'

Each run's keys override the shared ones; the runs go one after another in one process (the
imports cost seconds). Prints one JSON object: ``runs``, each with ``followed`` (the URL the
client posted to) and every event the client yielded, in 0.3 JSON (``{"task": …, "update": …}``
or ``{"message": …}``).
"""

from __future__ import annotations

import asyncio
import base64
import json
import sys
import uuid
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import Message, MessageSendParams, Part, Role, TextPart
from payments_py.a2a.payments_client import PaymentsClient
from payments_py.x402.types import DelegationConfig

from tests.conformance.conftest import Recorder, crypto_delegation, payments_for, point_sdk_at

X402_EXTENSION = "https://github.com/google-agentic-commerce/a2a-x402/blob/main/spec/v0.2"


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


def _message(text: str, metadata: dict[str, Any] | None = None, task_id: str | None = None) -> Any:
    return Message(
        role=Role.user,
        message_id=str(uuid.uuid4()),
        parts=[Part(root=TextPart(text=text))],
        metadata=metadata,
        task_id=task_id,
    )


async def _card(url: str) -> Any:
    async with httpx.AsyncClient(timeout=30) as http:
        return await A2ACardResolver(http, url).get_agent_card()


async def payments_py(args: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    url = (await _card(args["url"])).url if args.get("followCard") else args["url"]
    payments = payments_for(args["apiKey"])
    delegation = await asyncio.to_thread(crypto_delegation, payments)
    client = PaymentsClient(
        agent_base_url=url,
        payments=payments,
        agent_id=args["agentId"],
        plan_id=args["planId"],
        delegation_config=DelegationConfig(delegation_id=delegation),
    )
    stream = client.send_message_stream(MessageSendParams(message=_message(args["prompt"])))
    return url, [_dump(item) async for item in stream]


def _payload(token: str) -> Any:
    """The decoded access token: what ``x402.payment.payload`` carries."""
    return json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))


async def a2a_03(args: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    card = await _card(args["url"])
    async with httpx.AsyncClient(timeout=30) as http:
        config = ClientConfig(streaming=False, httpx_client=http, extensions=[X402_EXTENSION])
        client = ClientFactory(config).create(card)
        events = [_dump(item) async for item in client.send_message(_message(args["prompt"]))]
        task_id = events[-1]["task"]["id"]
        paid = {"x402.payment.status": "payment-submitted"}
        paid["x402.payment.payload"] = _payload(args["token"])
        follow_up = _message("(payment)", paid, task_id)
        events += [_dump(item) async for item in client.send_message(follow_up)]
        await client.close()
    return card.url, events


async def buy(args: dict[str, Any]) -> list[dict[str, Any]]:
    done = []
    for run in args.pop("runs"):
        every = {**args, **run}
        buyer = a2a_03 if every.get("client") == "a2a-0.3" else payments_py
        followed, events = await buyer(every)
        done.append({"followed": followed, "events": events})
    return done


def main() -> None:
    args = json.loads(sys.argv[1])
    with pytest.MonkeyPatch.context() as mp:
        point_sdk_at(mp, args["origin"], Recorder())
        runs = asyncio.run(buy(args))
    print(json.dumps({"runs": runs}))


if __name__ == "__main__":
    main()
