"""run_handler: every shape of agent handler gives the same answer bytes."""

from __future__ import annotations

import json
from typing import Any

from svc_gateway.selling.handlers import run_handler


async def answer_of(prompt: str) -> dict[str, Any]:
    return {"echo": prompt}


async def async_handler(request: dict[str, Any]) -> dict[str, Any]:
    return await answer_of(request["prompt"])


async def async_returning_awaitable(request: dict[str, Any]) -> Any:
    return answer_of(request["prompt"])  # an awaitable, awaited by run_handler


def sync_handler(request: dict[str, Any]) -> dict[str, Any]:
    return {"echo": request["prompt"]}


async def async_returning_a_list(request: dict[str, Any]) -> list[str]:
    return [request["prompt"]]


async def test_async_sync_and_awaitable_answers_are_the_same_json() -> None:
    answers = [
        await run_handler(handler, "hi")
        for handler in (async_handler, async_returning_awaitable, sync_handler)
    ]
    assert {(a.status, a.body) for a in answers} == {(200, b'{"echo":"hi"}')}


async def test_an_answer_that_is_not_an_object_is_still_json() -> None:
    answer = await run_handler(async_returning_a_list, "hi")
    assert (answer.status, json.loads(answer.body)) == (200, ["hi"])
