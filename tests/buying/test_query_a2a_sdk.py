"""svc_queryAgent meeting an A2A agent where a2a-sdk 1.x is missing (the main environment holds
payments-py's a2a-sdk 0.3): it refuses before paying and names the environment to use (the a2a
extra in a venv of its own: in this one it would clash with payments-py's pin)."""

from __future__ import annotations

import importlib.util
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import cast

import pytest
from aiohttp import web

from svc_gateway.account.core import PluginCore
from svc_gateway.buying.a2a import CARD_PATH, query_a2a_agent
from svc_gateway.chat.failure import ToolFailure
from svc_gateway.config import PluginConfig
from svc_gateway.tools.query import QueryAgentParams
from tests.support import serve_app

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("a2a.helpers") is not None,
    reason="a2a-sdk 1.x is installed here (tests/e2e/a2a covers paying with it)",
)


@pytest.fixture
async def a2a_agent() -> AsyncIterator[tuple[str, list[str]]]:
    """An agent serving an A2A 1.x card naming its URL; the paths it was asked for."""
    asked: list[str] = []
    base = ""

    async def card(request: web.Request) -> web.Response:
        asked.append(request.path)
        interface = {"url": base + "/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
        return web.json_response({"name": "agent", "supportedInterfaces": [interface]})

    async def rpc(request: web.Request) -> web.Response:
        asked.append(request.path)
        return web.json_response({})

    app = web.Application()
    app.router.add_get(CARD_PATH, card)
    app.router.add_post("/a2a", rpc)
    async with serve_app(app) as origin:
        base = origin
        yield base + "/a2a", asked


async def test_an_a2a_agent_without_a2a_sdk_1x_names_an_environment_of_its_own_and_pays_nothing(
    a2a_agent: tuple[str, list[str]],
) -> None:
    url, asked = a2a_agent
    spent: list[str] = []
    core = cast(
        PluginCore,
        SimpleNamespace(config=PluginConfig(), client=object, spent=spent.append),
    )
    params = QueryAgentParams.model_validate({"agentUrl": url, "prompt": "hello"})
    with pytest.raises(ToolFailure) as caught:
        await query_a2a_agent(core, params)
    assert caught.value.code == "a2a_unavailable"
    assert "a2a-sdk 1.x" in caught.value.message and "nothing was paid" in caught.value.message
    # here payments-py's pin: the hint names an environment of its own, not this one
    assert "this environment has a2a-sdk 0.3" in caught.value.message
    hint = caught.value.hint or ""
    assert "environment of its own" in hint and "without payments-py" in hint
    assert "python -m venv .venv-a2a && .venv-a2a/bin/pip install -e '.[a2a]'" in hint
    assert asked == [CARD_PATH]  # the probe read the card; nothing was sent to the agent
    assert spent == []  # no plan was charged


async def test_without_any_a2a_sdk_the_hint_still_names_the_environment(
    a2a_agent: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.metadata

    def none(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", none)  # as where a2a-sdk was never installed
    core = cast(PluginCore, SimpleNamespace(config=PluginConfig(), client=object))
    params = QueryAgentParams.model_validate({"agentUrl": a2a_agent[0], "prompt": "hello"})
    with pytest.raises(ToolFailure) as caught:
        await query_a2a_agent(core, params)
    assert caught.value.code == "a2a_unavailable"
    assert "this environment has" not in caught.value.message
    assert ".venv-a2a/bin/pip install -e '.[a2a]'" in (caught.value.hint or "")
