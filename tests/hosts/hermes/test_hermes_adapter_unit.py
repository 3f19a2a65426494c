"""The Hermes adapter against a fake ``ctx`` and a stand-in ``svc_gateway.register``. Settings
are read through the real ``hermes_cli.config`` (Hermes is installed with the ``hermes`` extra);
the real-host behaviour is in the other test modules."""

from __future__ import annotations

import asyncio
import json
import logging
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import svc_gateway
from svc_gateway.host import (
    BEFORE_PROMPT_BUILD,
    CommandContext,
    CommandSpec,
    GatewayAPI,
    PromptContext,
    ToolResult,
    ToolSpec,
)
from svc_gateway.hosts import hermes, hermes_users
from svc_gateway.runtime import PluginRuntime


class FakeCtx:
    """The slice of Hermes 0.19.0's PluginContext the adapter uses."""

    def __init__(self, fail_on_tool: bool = False, manager: object | None = None) -> None:
        self._manager = manager  # Hermes's plugin manager: one per profile
        self.tools: dict[str, dict[str, Any]] = {}
        self.commands: dict[str, dict[str, Any]] = {}
        self.hooks: dict[str, list[Any]] = {}
        self.fail_on_tool = fail_on_tool
        self.manifest = types.SimpleNamespace(name="svc", key="svc")

    def register_tool(self, **kwargs: Any) -> None:
        if self.fail_on_tool:
            raise RuntimeError("registry full")
        self.tools[kwargs["name"]] = kwargs

    def register_command(
        self, name: str, handler: Any, description: str = "", args_hint: str = ""
    ) -> None:
        self.commands[name] = {"handler": handler, "description": description, "hint": args_hint}

    def register_hook(self, name: str, callback: Any) -> None:
        self.hooks.setdefault(name, []).append(callback)


class UpstreamCtx(FakeCtx):
    """Newer Hermes: ``ctx.get_config(key, default)`` reads plugins.entries.<id>.settings.<key>."""

    def __init__(self, settings: dict[str, Any]) -> None:
        super().__init__()
        self.settings = settings

    def get_config(self, key: str, default: Any = None) -> Any:
        return self.settings.get(key, default)


class Handle:
    def __init__(self, runtime: PluginRuntime) -> None:
        self.runtime = runtime
        self.closed = False

    def close(self) -> None:
        self.closed = True
        self.runtime.close()


@pytest.fixture
def standin(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """A stand-in ``svc_gateway.register`` using the real contract and runtime."""
    state: dict[str, Any] = {"handles": [], "hook_delay": 0.0}

    def register(api: GatewayAPI, **_options: Any) -> Handle:
        runtime = PluginRuntime()
        handle = Handle(runtime)
        state["handles"].append(handle)
        state["config"] = dict(api.plugin_config)

        async def balance(params: dict[str, Any]) -> ToolResult:
            async def work() -> ToolResult:
                return ToolResult.ok({"planId": params.get("planId"), "balance": "100"})

            return await runtime.run(work())

        async def boom(params: dict[str, Any]) -> ToolResult:
            raise RuntimeError("leaks local:eyJhbGciOiJub25lIn0.eyJzdWIiOiIweDEifQ.c2ln")

        async def odd(params: dict[str, Any]) -> ToolResult:
            return ToolResult(structuredContent={"x402Version": 2, "accepts": []}, isError=True)

        async def login(ctx: CommandContext) -> str:
            return f"args={ctx.args!r} sender={ctx.sender_id}"

        async def context(ctx: PromptContext) -> str | None:
            async def work() -> str:
                await asyncio.sleep(state["hook_delay"])
                return f"Balance: 100 credits ({ctx.channel})"

            return await runtime.run(work())

        schema = {"type": "object", "properties": {"planId": {"type": "string"}}}
        api.register_tool(ToolSpec("svc_checkBalance", "Balance", schema, balance))
        api.register_tool(ToolSpec("svc_boom", "Fails", schema, boom))
        api.register_tool(ToolSpec("svc_odd", "Odd error", schema, odd))
        api.register_command(CommandSpec("svc_login", "Log in", True, login, "<env:KEY>"))
        api.register_command(CommandSpec("svc_logout", "Log out", False, login))
        api.on(BEFORE_PROMPT_BUILD, context)
        api.on("after_prompt", context)  # unknown events are ignored with a warning
        return handle

    monkeypatch.setattr(svc_gateway, "register", register, raising=False)
    yield state
    hermes._close_at_exit()
    for handle in state["handles"]:
        if not handle.closed:
            handle.close()


def test_register_translates_tools_commands_and_hook(standin: dict[str, Any]) -> None:
    ctx = UpstreamCtx({"environment": "local", "baseUrl": "http://127.0.0.1:1/api/v1"})
    hermes.register(ctx)
    assert standin["config"] == {"environment": "local", "baseUrl": "http://127.0.0.1:1/api/v1"}

    tool = ctx.tools["svc_checkBalance"]
    assert tool["toolset"] == "svc" and tool["is_async"] is True
    assert tool["schema"] == {
        "name": "svc_checkBalance",
        "description": "Balance",
        "parameters": {"type": "object", "properties": {"planId": {"type": "string"}}},
    }
    out = asyncio.run(tool["handler"]({"planId": "p1"}, task_id="t", session_id="s"))
    assert json.loads(out) == {"planId": "p1", "balance": "100"}
    assert json.loads(asyncio.run(tool["handler"](None))) == {"planId": None, "balance": "100"}
    boom = json.loads(asyncio.run(ctx.tools["svc_boom"]["handler"]({})))
    assert boom["error"]["code"] == "internal" and "eyJ" not in json.dumps(boom)
    odd = json.loads(asyncio.run(ctx.tools["svc_odd"]["handler"]({})))
    assert odd == {"error": {"x402Version": 2, "accepts": []}}
    bad = json.loads(asyncio.run(tool["handler"]("not a dict")))
    assert bad["error"]["code"] == "invalid_params"

    assert sorted(ctx.commands) == ["svc-login", "svc-logout", "svc_login", "svc_logout"]
    assert ctx.commands["svc-login"]["hint"] == "[env:KEY]"
    assert ctx.commands["svc_login"]["hint"] == "<env:KEY>"
    assert ctx.commands["svc-logout"]["hint"] == ""
    assert ctx.commands["svc_logout"]["hint"].startswith("<")
    for name in ("svc-login", "svc_login"):
        reply = asyncio.run(ctx.commands[name]["handler"]("  local:KEY "))
        assert reply == "args='local:KEY' sender=None"

    (hook,) = ctx.hooks["pre_llm_call"]
    result = hook(session_id="s", user_message="hi", platform="telegram", sender_id="42", x=1)
    assert result == {"context": "Balance: 100 credits (telegram)"}


def test_hook_gives_up_after_its_budget(standin: dict[str, Any]) -> None:
    ctx = UpstreamCtx({})
    hermes.register(ctx)
    (hook,) = ctx.hooks["pre_llm_call"]
    handle = hermes.current_handle()
    assert handle is not None
    finished: list[str] = []

    async def slow(_ctx: PromptContext) -> str:
        await asyncio.sleep(30)
        finished.append("late")
        return "late"

    fast = hermes.make_pre_llm_call([slow], handle.runtime, budget_secs=0.2)
    assert fast(platform="cli") is None
    assert finished == []  # the prompt went on while the slow hook was still running
    assert hook(platform="cli") == {"context": "Balance: 100 credits (cli)"}


def test_a_closed_plugin_answers_instead_of_raising(standin: dict[str, Any]) -> None:
    ctx = FakeCtx()
    hermes.register(ctx)
    hermes._close_at_exit()
    assert hermes.current_handle() is None
    # the stand-in's tool bridges through runtime.run(), which now raises RuntimeClosed
    out = json.loads(asyncio.run(ctx.tools["svc_checkBalance"]["handler"]({})))
    assert out["error"]["code"] == "unavailable"
    assert ctx.hooks["pre_llm_call"][0](platform="cli") is None


def test_registration_is_all_or_nothing(standin: dict[str, Any]) -> None:
    with pytest.raises(RuntimeError, match="registry full"):
        hermes.register(FakeCtx(fail_on_tool=True))
    assert standin["handles"][-1].closed
    assert hermes.current_handle() is None


def test_reregistering_one_profile_closes_its_previous_plugin(standin: dict[str, Any]) -> None:
    manager = object()
    hermes.register(FakeCtx(manager=manager))
    hermes.register(FakeCtx(manager=manager))  # a forced rediscovery of the same profile
    first, second = standin["handles"][-2:]
    assert first.closed and not second.closed
    assert hermes.current_handle() is second


class UnloadingCtx(FakeCtx):
    """Newer Hermes: ``ctx.on_unload(callback)``, called when the profile unloads the plugin."""

    def __init__(self) -> None:
        super().__init__(manager=object())
        self.unloads: list[Any] = []

    def on_unload(self, callback: Any) -> None:
        self.unloads.append(callback)


def test_each_profile_keeps_its_plugin_until_its_own_unload(standin: dict[str, Any]) -> None:
    first_ctx, second_ctx = UnloadingCtx(), UnloadingCtx()
    hermes.register(first_ctx)
    hermes.register(second_ctx)
    first, second = standin["handles"][-2:]
    assert not first.closed and not second.closed  # the second profile left the first running
    for ctx in (first_ctx, second_ctx):
        out = json.loads(asyncio.run(ctx.tools["svc_checkBalance"]["handler"]({"planId": "p"})))
        assert out == {"planId": "p", "balance": "100"}
    (unload_first,) = first_ctx.unloads
    unload_first()
    assert first.closed and not second.closed
    assert hermes.current_handle() is second
    (unload_second,) = second_ctx.unloads
    unload_second()
    assert second.closed and hermes.current_handle() is None


def test_settings_fall_back_to_the_hermes_config_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Hermes 0.19.0 has no ``ctx.get_config``: the adapter reads the real Hermes config file."""
    pytest.importorskip("hermes_cli.config", reason="Hermes Agent is not installed ([hermes])")
    variants: list[tuple[Any, dict[str, Any]]] = [
        (
            {
                "plugins": {
                    "entries": {"svc": {"settings": {"planId": "p1", "environment": "local"}}}
                }
            },
            {"planId": "p1", "environment": "local"},
        ),
        ({}, {}),
        ({"plugins": None}, {}),
        ({"plugins": {"entries": {"svc": {"settings": 3}}}}, {}),
    ]
    for number, (config, expected) in enumerate(variants):
        home = tmp_path / f"hermes-{number}"
        home.mkdir()
        (home / "config.yaml").write_text(json.dumps(config))  # JSON is valid YAML
        monkeypatch.setenv("HERMES_HOME", str(home))
        assert hermes.read_settings(FakeCtx()) == expected, config


def test_settings_via_get_config_only_report_keys_that_are_set() -> None:
    ctx = UpstreamCtx({"svcApiKey": None, "planId": "p1", "unknownKey": 1})
    assert hermes.read_settings(ctx) == {"planId": "p1"}


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("svc_login", ("svc-login", "svc_login")),
        ("/svc-logout", ("svc-logout", "svc_logout")),
        ("status", ("status", None)),
    ],
)
def test_command_names(name: str, expected: tuple[str, str | None]) -> None:
    assert hermes.command_names(name) == expected


def test_result_json_shapes() -> None:
    assert json.loads(hermes.result_json(ToolResult.ok({"a": 1}))) == {"a": 1}
    err = ToolResult.error("rate_limited", "Slow down", "Retry in 30 s")
    assert json.loads(hermes.result_json(err)) == err.structuredContent
    assert json.loads(hermes.result_json({"b": 2})) == {"b": 2}
    assert json.loads(hermes.result_json(None))["error"]["code"] == "internal"


def test_the_api_object_satisfies_the_host_contract() -> None:
    api = hermes.HermesGatewayAPI({"planId": "p"}, logging.getLogger("t"))
    assert isinstance(api, GatewayAPI)
    assert api.plugin_config == {"planId": "p"}


def test_a_gateway_command_without_a_sender_keeps_its_platform_and_is_never_the_console() -> None:
    """Hermes's gateway fires ``pre_gateway_dispatch`` and then awaits the command in the
    message's task; its CLI and TUI run the command as a loop of its own. Only the latter is
    the local console: a message without a user id (a channel post) keeps its platform."""
    from gateway.config import Platform
    from gateway.platforms.base import MessageEvent
    from gateway.session import SessionSource
    from hermes_cli.plugins import resolve_plugin_command_result

    from svc_gateway.hosts.hermes_users import pre_gateway_dispatch

    seen: list[tuple[str | None, str | None, bool]] = []

    async def record(ctx: CommandContext) -> str:
        seen.append((ctx.sender_id, ctx.channel, ctx.is_local_console))
        return "ok"

    handler = hermes.make_command_handler(CommandSpec("svc_login", "Log in", True, record))

    async def gateway(user_id: str | None) -> str:
        source = SessionSource(platform=Platform.TELEGRAM, chat_id="c", user_id=user_id)
        pre_gateway_dispatch(event=MessageEvent(text="/svc_login status", source=source))
        return await handler("status")

    async def awaited_elsewhere() -> str:
        return await handler("status")

    assert resolve_plugin_command_result(handler("status")) == "ok"  # the CLI's own call
    asyncio.run(gateway(None))
    asyncio.run(gateway("42"))
    asyncio.run(awaited_elsewhere())  # no gateway message, but not a loop of its own either
    assert seen == [
        (None, None, True),
        (None, "telegram", False),
        ("42", "telegram", False),
        (None, None, False),
    ]


def test_a_gateway_turn_without_a_sender_runs_no_tool_as_anybody() -> None:
    """``pre_llm_call`` of a Telegram turn without a user id: that session's svc tools are
    refused, neither the operator's nor the previous sender's; the CLI's turns stay the
    gateway's own account."""
    from svc_gateway.hosts.hermes_users import Senders

    callers: list[Any] = []

    async def balance(params: dict[str, Any], caller: Any = None) -> ToolResult:
        callers.append(caller)
        return ToolResult.ok({"balance": "100"})

    senders = Senders()
    schema = {"type": "object", "properties": {}}
    handler = hermes.make_tool_handler(ToolSpec("svc_checkBalance", "B", schema, balance), senders)
    senders.remember("group", "42", "telegram")
    senders.remember("group", "", "telegram")  # then an anonymous admin posts in that group
    senders.remember("cli-session", "", "cli")
    refused = json.loads(asyncio.run(handler({}, session_id="group")))
    assert refused["error"]["code"] == "no_account"
    assert json.loads(asyncio.run(handler({}, session_id="cli-session"))) == {"balance": "100"}
    assert callers == [None]  # only the CLI's call ran, as the gateway's own account


# -- metering fails closed (issue 43, item 12) ---------------------------------------------------


def metered_guard() -> hermes_users.MeteringGuard:
    return hermes_users.MeteringGuard(lambda name: name == "image_gen")


def test_a_hermes_without_the_middleware_blocks_metered_tools_only() -> None:
    guard = metered_guard()  # nothing installed: this Hermes has no register_middleware
    blocked = guard.pre_tool_call(tool_name="image_gen", tool_call_id="c1")
    assert blocked is not None and blocked["action"] == "block"
    assert "has no tool_execution middleware" in blocked["message"]
    assert "did not run and nothing was charged" in blocked["message"]
    assert guard.pre_tool_call(tool_name="read_file") is None
    assert guard.pre_tool_call(tool_name=None) is None


def test_a_middleware_gone_from_hermess_list_blocks_until_it_is_back() -> None:
    guard = metered_guard()
    listed: list[Any] = []

    def middleware(**_kwargs: Any) -> None:
        return None

    guard.installed(middleware, lambda: listed)
    blocked = guard.pre_tool_call(tool_name="image_gen")
    assert blocked is not None and "not active in this Hermes process" in blocked["message"]
    listed.append(middleware)
    assert guard.pre_tool_call(tool_name="image_gen") is None
    guard.installed(middleware, lambda: None)  # a Hermes keeping the list out of sight
    assert guard.pre_tool_call(tool_name="image_gen") is None


def test_only_a_metered_call_that_ran_unseen_blocks_the_later_ones(
    caplog: pytest.LogCaptureFixture,
) -> None:
    guard = metered_guard()
    guard.installed(lambda **_k: None, lambda: None)
    guard.saw("seen")
    guard.saw("")  # no id: nothing to remember
    guard.post_tool_call(tool_name="image_gen", tool_call_id="seen", status="ok")
    guard.post_tool_call(tool_name="image_gen", tool_call_id="c2", status="blocked")
    guard.post_tool_call(tool_name="image_gen", tool_call_id="", status="ok")
    guard.post_tool_call(tool_name="read_file", tool_call_id="c3", status="ok")
    assert guard.bypassed is None and guard.pre_tool_call(tool_name="image_gen") is None
    with caplog.at_level(logging.ERROR):
        guard.post_tool_call(tool_name="image_gen", tool_call_id="c4", status="error")
        guard.post_tool_call(tool_name="image_gen", tool_call_id="c5", status="ok")
    assert len([r for r in caplog.records if "without the svc plugin" in r.getMessage()]) == 1
    blocked = guard.pre_tool_call(tool_name="image_gen")
    assert blocked is not None and "without its tool_execution middleware" in blocked["message"]
