"""The Hermes adapter's own guarantees inside real Hermes Agent 0.19.0, with a stand-in for
``svc_gateway.register`` (built on the real host contract and runtime), so these hold whatever the
plugin core does: command names on both dispatch paths, the Telegram menu, error JSON that never
carries a secret, and a balance hook that never outlasts its budget."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("hermes_cli")

from .hermes_child import FAKE_SECRET
from .hermes_support import ChildRun, run_child, section

pytestmark = pytest.mark.hermes

SETTINGS = {"environment": "local", "baseUrl": "http://127.0.0.1:9/api/v1", "planId": "plan-x"}


@pytest.fixture(scope="module")
def standin(tmp_path_factory: pytest.TempPathFactory) -> ChildRun:
    home: Path = tmp_path_factory.mktemp("hermes-standin")
    return run_child("standin", home, SETTINGS)


def test_discovery_and_settings(standin: ChildRun) -> None:
    found = section(standin, "discovery")
    plugin = found["plugin"]
    assert plugin is not None and plugin["enabled"] and plugin["error"] is None
    assert plugin["source"] == "entrypoint"
    assert found["tools"] == ["svc_broken", "svc_ok", "svc_refused"]
    assert plugin["tools"] == 3 and plugin["hooks"] == 1 and found["has_pre_llm_call"]
    # The settings reached the plugin as its camelCase config mapping.
    assert standin.report["config_seen"] == SETTINGS
    # Hyphenated primaries for the gateway, underscore aliases for the CLI.
    assert sorted(found["commands"]) == ["svc-login", "svc-logout", "svc_login", "svc_logout"]
    assert found["commands"]["svc-login"]["args_hint"] == "[env:KEY]"
    assert found["commands"]["svc_login"]["args_hint"].startswith("<")
    assert found["commands"]["svc_logout"]["args_hint"].startswith("<")
    schema = next(d for d in found["definitions"] if d["function"]["name"] == "svc_ok")
    assert schema["function"]["parameters"]["properties"] == {"x": {"type": "integer"}}


def test_telegram_menu_lists_each_command_once(standin: ChildRun) -> None:
    menus = section(standin, "menu")
    assert menus["telegram_bot_commands"] == ["svc_login", "svc_logout"]
    assert sorted(menus["telegram_menu_commands"]) == ["svc_login", "svc_logout"]


def test_tool_results_are_json_and_run_on_the_plugin_loop(standin: ChildRun) -> None:
    tools = section(standin, "tools")
    for path in ("plain", "in_loop"):
        assert json.loads(tools["svc_ok"][path]) == {"echo": {"x": 1}}
        refused = json.loads(tools["svc_refused"][path])
        assert refused == {
            "error": {
                "code": "not_logged_in",
                "message": "Nobody is logged in.",
                "hint": "Run /svc_login",
            }
        }
        broken = json.loads(tools["svc_broken"][path])
        assert broken["error"]["code"] == "internal"
        assert "RuntimeError" in broken["error"]["message"] and broken["error"]["hint"]
    # Whatever loop Hermes used, the work itself ran on the plugin-owned loop.
    assert tools["threads"] and set(tools["threads"]) == {"svc-plugin-loop"}


@pytest.mark.parametrize("spelling", ["svc_login", "svc-login", "svc_logout", "svc-logout"])
def test_both_spellings_reach_the_command_on_gateway_and_cli(
    standin: ChildRun, spelling: str
) -> None:
    commands = section(standin, "commands")[spelling]
    expected = "login args='local:KEY'" if "login" in spelling else "logged out"
    assert commands["gateway"] == expected  # GatewayRunner._handle_message
    assert commands["gateway_lookup"] == expected
    assert commands["cli"] == expected  # get_plugin_command_handler + resolve_plugin_command_result
    assert commands["cli_app"] == [expected]  # HermesCLI.process_command


def test_command_failures_reply_without_secrets(standin: ChildRun) -> None:
    commands = section(standin, "commands")
    for key in ("explode_gateway", "explode_cli"):
        assert "internal error" in commands[key] and "ValueError" in commands[key]
        assert FAKE_SECRET not in commands[key]
    # Every handler ran on the plugin loop, with only the argument string (no sender in 0.19.0).
    assert {thread for *_, thread in commands["calls"]} == {"svc-plugin-loop"}


def test_balance_hook_returns_context_and_respects_its_budget(standin: ChildRun) -> None:
    hook = section(standin, "hook")
    for run in hook["fast"]:
        assert run["results"] == [{"context": "STANDIN CONTEXT sender=42 channel=telegram"}]
    # The slow hook sleeps 5 s, beyond the budget: the prompt goes on without its context (no
    # duration asserted here; the hook's latency is measured in the benchmarks).
    (slow,) = hook["slow"]
    assert slow["results"] == []
    (broken,) = hook["broken"]
    assert broken["results"] == []


def test_no_secret_in_any_output(standin: ChildRun) -> None:
    everything: Any = json.dumps(standin.report) + standin.stdout + standin.stderr
    for log_file in (standin.home / "hermes" / "logs").glob("*"):
        if log_file.is_file():
            everything += log_file.read_text(errors="replace")
    assert FAKE_SECRET not in everything
    assert FAKE_SECRET.split(":", 1)[1] not in everything
