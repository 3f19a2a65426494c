"""svc_queryAgent's LangGraph request shape (buying/langgraph.py), unit by unit: which URLs are
LangGraph runs, the run's body, and the one graph found on ``/assistants/search`` (or the clear
error naming the graphs). tests/selling/ways_in/langgraph/test_buyers.py pays a real one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from svc_gateway.buying.langgraph import find_assistant, is_langgraph_run, run_body
from svc_gateway.chat.failure import ToolFailure


@dataclass
class Query:
    prompt: str = ""
    arguments: dict[str, Any] | None = None


def test_run_urls_are_recognised() -> None:
    assert is_langgraph_run("https://a.example/runs/wait")
    assert is_langgraph_run("https://a.example/prefix/threads/t-1/runs/wait?x=1")
    assert not is_langgraph_run("https://a.example/runs/stream")
    assert not is_langgraph_run("https://a.example/svc/agent")


def test_the_body_is_the_arguments_else_the_prompt_as_a_user_message() -> None:
    assert run_body(Query(arguments={"message": "hi"}), "echo") == {  # type: ignore[arg-type]
        "assistant_id": "echo",
        "input": {"message": "hi"},
    }
    assert run_body(Query(prompt="hello"), "chat")["input"] == {  # type: ignore[arg-type]
        "messages": [{"role": "user", "content": "hello"}]
    }
    with pytest.raises(ToolFailure, match="prompt or arguments"):
        run_body(Query(prompt="  "), "chat")  # type: ignore[arg-type]


def transport(status: int, body: Any, seen: list[httpx.Request]) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if isinstance(body, bytes):
            return httpx.Response(status, content=body)
        return httpx.Response(status, json=body)

    return httpx.MockTransport(answer)


async def test_the_only_graph_is_found_on_the_deployments_search() -> None:
    seen: list[httpx.Request] = []
    listed = [{"graph_id": "echo", "assistant_id": "u-1"}, {"graph_id": "echo"}]
    async with httpx.AsyncClient(transport=transport(200, listed, seen)) as http:
        found = await find_assistant(http, "http://127.0.0.1:2024/base/threads/t/runs/wait")
    assert found == "echo"
    assert str(seen[0].url) == "http://127.0.0.1:2024/base/assistants/search"


@pytest.mark.parametrize(
    ("status", "body", "named"),
    [
        (200, [{"graph_id": "a"}, {"graph_id": "b"}], '"a", "b"'),
        (200, [], "none could be read"),
        (404, {"detail": "no"}, "none could be read"),
        (200, b"not json", "none could be read"),
        (200, {"not": "a list"}, "none could be read"),
    ],
)
async def test_several_or_no_graphs_ask_for_assistant_id(
    status: int, body: Any, named: str
) -> None:
    async with httpx.AsyncClient(transport=transport(status, body, [])) as http:
        with pytest.raises(ToolFailure) as failed:
            await find_assistant(http, "http://127.0.0.1:2024/runs/wait")
    assert named in failed.value.message and "assistantId" in failed.value.hint
