"""The agent the paid endpoint sells (selling/ways_in/agent.py): its price and one prompt sold."""

from __future__ import annotations

from typing import Any

import pytest

from svc_gateway.selling.handlers import Answer, HandlerError
from svc_gateway.selling.types import PaidRequest
from svc_gateway.selling.ways_in.agent import ENDPOINT_ROUTE, PromptAgent


def echo(body: dict[str, Any]) -> dict[str, Any]:
    return {"answer": body["prompt"]}


async def test_an_agent_without_a_credits_function_has_no_price_of_its_own() -> None:
    """Without the host's credits function the seller's price applies: asking the agent for
    one is a handler error, never a made-up price, and its request leaves credits to the flow."""
    agent = PromptAgent(echo)
    with pytest.raises(HandlerError, match="no credits function"):
        await agent.price("hello")
    assert agent.request("hello", "tok", "http://127.0.0.1/svc/agent").credits is None


async def test_a_credits_function_must_give_an_int() -> None:
    agent = PromptAgent(echo, credits=lambda body: True)
    with pytest.raises(HandlerError, match="must return an int"):
        await agent.price("hello")
    priced = PromptAgent(echo, credits=lambda body: len(body["prompt"]))
    assert await priced.price("hello") == 5


class RecordingFlow:
    """A flow that records the request it was handed and answers with a fixed answer."""

    def __init__(self) -> None:
        self.requests: list[PaidRequest] = []

    async def handle(self, request: PaidRequest) -> Any:
        self.requests.append(request)
        return type("Outcome", (), {"answer": Answer.json(200, {"ok": True})})()


async def test_serve_sells_one_prompt_through_the_flow_and_returns_its_answer() -> None:
    flow = RecordingFlow()
    agent = PromptAgent(echo)
    answer = await agent.serve(flow, "hello", "tok", "http://127.0.0.1/svc/agent")  # type: ignore[arg-type]
    assert answer.status == 200
    (request,) = flow.requests
    assert request.token == "tok" and request.url == "http://127.0.0.1/svc/agent"
    assert request.route == ENDPOINT_ROUTE and request.verb == "POST"
