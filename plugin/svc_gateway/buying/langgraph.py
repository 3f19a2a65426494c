"""svc_queryAgent for a LangGraph deployment: its ``/runs/wait`` URL gets LangGraph's request
shape, ``{"assistant_id": ..., "input": ...}``, instead of ``{"prompt": ...}``.

The assistant is ``assistantId`` (a graph id of the deployment's ``langgraph.json``, or an
assistant's UUID); without one, the deployment's ``POST /assistants/search`` (free, on the same
origin as the checked URL, read bounded, before any token exists) must list exactly one graph.
The input is ``arguments`` when given (the graph's own input object), else the prompt as one user
message (``{"messages": [{"role": "user", "content": prompt}]}``, the shape of LangGraph's chat
graphs). The answer is the run's final state, read like any other answer.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from ..chat.failure import ToolFailure
from ..interop.agent_card import TooLarge, read_limited
from .request import AgentQuery

if TYPE_CHECKING:
    import httpx

#: a LangGraph run-and-wait URL: stateless, or on a thread
RUNS_WAIT = re.compile(r"^(?P<base>.*?)(?:/threads/[^/]+)?/runs/wait/?$")
#: the assistants list read to find the only graph (a few KiB at most)
MAX_SEARCH_BYTES = 64 * 1024


def is_langgraph_run(url: str) -> bool:
    """Whether ``url`` (query dropped) is a LangGraph ``/runs/wait`` route."""
    return RUNS_WAIT.match(url.split("?", 1)[0]) is not None


def run_body(p: AgentQuery, assistant_id: str) -> dict[str, Any]:
    """The request of one run: the assistant and its input."""
    run_input = p.arguments if p.arguments is not None else _messages(p.prompt)
    return {"assistant_id": assistant_id, "input": run_input}


def _messages(prompt: str) -> dict[str, Any]:
    if not prompt.strip():
        raise ToolFailure(
            "invalid_params",
            "prompt or arguments is required",
            "Pass the prompt, or the graph's input object as arguments.",
        )
    return {"messages": [{"role": "user", "content": prompt}]}


async def find_assistant(http: httpx.AsyncClient, url: str) -> str:
    """The deployment's only graph id (``POST <base>/assistants/search``); a clear error naming
    the graphs (as data) when there are several or none."""
    import httpx

    matched = RUNS_WAIT.match(url.split("?", 1)[0])
    assert matched is not None  # is_langgraph_run(url) was checked
    search = matched["base"] + "/assistants/search"
    try:
        async with http.stream("POST", search, json={"limit": 20}) as response:
            body = await read_limited(response, MAX_SEARCH_BYTES)
            status = response.status_code
        found = json.loads(body) if status == 200 else None
    except (httpx.HTTPError, TooLarge, ValueError):
        found = None
    graphs = sorted(
        {str(a.get("graph_id")) for a in found if isinstance(a, dict) and a.get("graph_id")}
        if isinstance(found, list)
        else set()
    )
    if len(graphs) == 1:
        return graphs[0]
    listed = ", ".join(json.dumps(g) for g in graphs[:10]) or "none could be read"
    raise ToolFailure(
        "invalid_params",
        f"This LangGraph deployment serves several graphs or none could be listed ({listed})",
        "Pass assistantId: the graph id (or the assistant's UUID) to run.",
    )
