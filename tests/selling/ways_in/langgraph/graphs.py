"""The graphs a LangGraph server serves in these tests: no LLM, nodes that echo or fail."""

from __future__ import annotations

import asyncio
from typing import TypedDict

from langgraph.graph import END, START, StateGraph


class State(TypedDict, total=False):
    message: str
    echo: str
    steps: list[str]


async def echo_node(state: State) -> State:
    return {"echo": "echo: " + state.get("message", "")}


async def boom_node(state: State) -> State:
    raise RuntimeError("graph failed on purpose")


def _step(name: str):  # type: ignore[no-untyped-def]
    async def node(state: State) -> State:
        await asyncio.sleep(0.05)  # the events leave one by one
        return {"steps": [*state.get("steps", []), name]}

    return node


def _one(node) -> object:  # type: ignore[no-untyped-def]
    builder = StateGraph(State)
    builder.add_node("run", node)
    builder.add_edge(START, "run")
    builder.add_edge("run", END)
    return builder.compile()


echo = _one(echo_node)
boom = _one(boom_node)

_slow = StateGraph(State)
for _name in ("a", "b", "c"):
    _slow.add_node(_name, _step(_name))
_slow.add_edge(START, "a")
_slow.add_edge("a", "b")
_slow.add_edge("b", "c")
_slow.add_edge("c", END)
slow = _slow.compile()
