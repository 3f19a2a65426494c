"""The real svc plugin inside real Hermes Agent 0.19.0, against the local sandbox service.

Each configuration runs in its own process (Hermes discovers plugins once per process) with a
temporary ``HERMES_HOME``; see ``hermes_child.py`` for what runs there and how Hermes calls it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("hermes_cli")

from .hermes_child import FINAL_TEXT, SVC_TOOLS
from .hermes_support import ChildRun, Sandbox, plan_balance, run_child, section

pytestmark = pytest.mark.hermes

COMMAND_NAMES = sorted(
    f"svc{sep}{name}"
    for sep in "-_"
    for name in ("login", "logout", "spend", "earnings", "approve", "deny", "allow")
)


def find_key(data: Any, key: str) -> Any:
    """The first value stored under ``key`` anywhere in nested JSON data (``None`` if absent)."""
    if isinstance(data, dict):
        if key in data:
            return data[key]
        values: list[Any] = list(data.values())
    elif isinstance(data, list):
        values = data
    else:
        return None
    for value in values:
        found = find_key(value, key)
        if found is not None:
            return found
    return None


def settings(sandbox: Sandbox, plan_id: str, *, with_key: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"environment": "local", "baseUrl": sandbox.base_url, "planId": plan_id}
    if with_key:
        out["svcApiKey"] = sandbox.subscriber.api_key
    return out


def secret_part(key: str) -> str:
    return key.split(":", 1)[1]


# -- configuration 1: logged in by config, with a plan -----------------------------------------


@pytest.fixture(scope="module")
def host(
    hermes_sandbox: Sandbox, hermes_plan_id: str, tmp_path_factory: pytest.TempPathFactory
) -> ChildRun:
    home: Path = tmp_path_factory.mktemp("hermes-host")
    return run_child(
        "host",
        home,
        settings(hermes_sandbox, hermes_plan_id, with_key=True),
        {"planId": hermes_plan_id},
    )


@pytest.fixture(scope="module")
def expected_balance(hermes_sandbox: Sandbox, hermes_plan_id: str) -> int:
    return plan_balance(hermes_sandbox, hermes_plan_id)


def test_discovery_lists_svc_with_tools_commands_and_hook(host: ChildRun) -> None:
    found = section(host, "discovery")
    plugin = found["plugin"]
    assert plugin is not None, "svc was not discovered through the hermes_agent.plugins entry point"
    assert plugin["enabled"] is True and plugin["error"] is None
    assert plugin["tools"] == 9 and plugin["hooks"] == 1 and plugin["commands"] == 14
    assert found["tools"] == sorted(SVC_TOOLS)
    assert sorted(found["commands"]) == COMMAND_NAMES
    assert found["has_pre_llm_call"] is True
    names = {d["function"]["name"] for d in found["definitions"]}
    assert names == set(SVC_TOOLS)
    for definition in found["definitions"]:
        function = definition["function"]
        assert function["description"] and function["parameters"]["type"] == "object"


def test_tool_dispatch_returns_the_plugin_json(
    host: ChildRun, hermes_plan_id: str, expected_balance: int
) -> None:
    tools = section(host, "tools")
    full = section(host, "handle_function_call")["result"]
    for raw in (tools["plain"], tools["in_loop"], full):
        data = json.loads(raw)
        assert "error" not in data, data
        assert int(find_key(data, "balance")) == expected_balance
        assert hermes_plan_id in raw


def test_a_read_tool_from_a_worker_thread_answers_through_the_plugin_loop(
    host: ChildRun, hermes_plan_id: str, expected_balance: int
) -> None:
    worker = section(host, "worker_tools")
    for raw in worker["results"]:
        data = json.loads(raw)
        assert "error" not in data, data
        assert int(find_key(data, "balance")) == expected_balance
        assert hermes_plan_id in raw
    # every read goes to the plugin loop (issue 42: no client per caller loop any more), unless
    # the balance cache answers it: the first call always crosses, none crosses twice
    assert 1 <= worker["crossings"] <= len(worker["results"])


def test_pre_llm_call_returns_the_balance_context(host: ChildRun, expected_balance: int) -> None:
    hook = section(host, "hook")
    assert len(hook["results"]) == 1
    (result,) = hook["results"]
    assert set(result) == {"context"} and result["context"].strip()
    assert str(expected_balance) in result["context"]
    assert hook["again"] == hook["results"]  # the second prompt is served from the cache
    # ... on Hermes's own thread: only the first (a cache miss) went to the plugin loop
    assert hook["loop_crossings_first"] == 1 and hook["loop_crossings_again"] == 0


@pytest.mark.parametrize("turn", ["agent_turn", "agent_turn_executor"])
def test_full_agent_turn_calls_the_tool_and_sees_the_context(
    host: ChildRun, turn: str, expected_balance: int
) -> None:
    run = section(host, turn)
    context = section(host, "hook")["results"][0]["context"]
    direct = json.loads(section(host, "tools")["plain"])
    assert run["final_response"] == FINAL_TEXT
    requests = run["requests"]
    assert len(requests) >= 2
    assert set(SVC_TOOLS) <= set(requests[0]["tools"])
    assert requests[0]["messages"][-1]["role"] == "user"
    tool_messages = [m for m in requests[-1]["messages"] if m["role"] == "tool"]
    assert len(tool_messages) == 1
    result = json.loads(tool_messages[0]["content"])
    assert "error" not in result
    assert int(find_key(result, "balance")) == expected_balance
    assert find_key(result, "balance") == find_key(direct, "balance")
    for body in requests:
        users = [m for m in body["messages"] if m["role"] == "user"]
        assert users and context in users[-1]["content"]
        for system in (m for m in body["messages"] if m["role"] == "system"):
            assert context not in system["content"]


def test_host_run_leaks_no_key(host: ChildRun, hermes_sandbox: Sandbox) -> None:
    text = json.dumps(host.report) + host.stdout + host.stderr
    for log_file in (host.home / "hermes" / "logs").glob("*"):
        if log_file.is_file():
            text += log_file.read_text(errors="replace")
    for key in (hermes_sandbox.subscriber.api_key, hermes_sandbox.builder.api_key):
        assert secret_part(key) not in text


# -- configuration 2: nobody logged in; /svc_login and /svc_logout -----------------------------


@pytest.fixture(scope="module")
def commands(
    hermes_sandbox: Sandbox, hermes_plan_id: str, tmp_path_factory: pytest.TempPathFactory
) -> ChildRun:
    home: Path = tmp_path_factory.mktemp("hermes-commands")
    return run_child(
        "commands",
        home,
        settings(hermes_sandbox, hermes_plan_id, with_key=False),
        {"planId": hermes_plan_id, "subscriberKey": hermes_sandbox.subscriber.api_key},
    )


def test_commands_registered_and_menu_has_no_duplicates(commands: ChildRun) -> None:
    found = section(commands, "discovery")
    assert found["plugin"]["error"] is None
    assert sorted(found["commands"]) == COMMAND_NAMES
    assert not found["commands"]["svc-login"]["args_hint"].startswith("<")
    menus = section(commands, "menu")
    assert menus["telegram_bot_commands"] == [
        "svc_login",
        "svc_logout",
        "svc_spend",
        "svc_earnings",
        "svc_approve",
        "svc_deny",
        "svc_allow",
    ]
    assert sorted(menus["telegram_menu_commands"]) == [
        "svc_allow",
        "svc_approve",
        "svc_deny",
        "svc_earnings",
        "svc_login",
        "svc_logout",
        "svc_spend",
    ]


@pytest.mark.parametrize(
    ("login", "logout"),
    [
        ("gateway_login", "gateway_logout"),  # GatewayRunner._handle_message
        ("cli_login", "cli_logout"),  # get_plugin_command_handler + resolve_plugin_command_result
        ("cli_app_login", "cli_app_logout"),  # HermesCLI.process_command
    ],
)
def test_login_and_logout_through_each_dispatch_path(
    commands: ChildRun, hermes_sandbox: Sandbox, expected_balance: int, login: str, logout: str
) -> None:
    flow = section(commands, "flow")
    assert "error" in json.loads(flow["before"]), "the plugin should start logged out"

    def reply(name: str) -> str:
        value = flow[name]
        text = "\n".join(value) if isinstance(value, list) else value
        assert isinstance(text, str) and text.strip(), f"{name} gave no reply"
        assert secret_part(hermes_sandbox.subscriber.api_key) not in text
        return text

    reply(login)
    after_login = json.loads(flow[f"after_{login}"])
    assert "error" not in after_login, after_login
    assert int(find_key(after_login, "balance")) == expected_balance
    reply(logout)
    assert "error" in json.loads(flow[f"after_{logout}"])


def test_typed_key_reply_warns_about_the_cli_history_and_offers_safer_ways(
    commands: ChildRun,
) -> None:
    flow = section(commands, "flow")
    for name in ("gateway_login", "cli_login"):
        text = flow[name]
        assert text.startswith("Logged in"), text
        assert str(commands.home / "hermes" / ".hermes_history") in text
        assert "/svc_login env:SVC_API_KEY" in text


def test_the_persons_approval_commands_reach_the_plugin_through_the_gateway(
    commands: ChildRun,
) -> None:
    flow = section(commands, "flow")
    assert flow["gateway_allow"].startswith("Allowed: paid queries"), flow["gateway_allow"]
    assert flow["gateway_approve"].startswith("No pending purchase of yours")


def test_login_from_an_environment_variable(
    commands: ChildRun, hermes_sandbox: Sandbox, expected_balance: int
) -> None:
    flow = section(commands, "flow")
    assert "SVC_UNSET_VARIABLE is not set" in flow["env_missing"]
    assert flow["env_login"].startswith("Logged in to the local environment as 0x")
    assert ".hermes_history" not in flow["env_login"]  # nothing was typed
    assert secret_part(hermes_sandbox.subscriber.api_key) not in flow["env_login"]
    assert int(find_key(json.loads(flow["after_env_login"]), "balance")) == expected_balance
    assert flow["env_logout"].startswith("Logged out")


def test_browser_login_through_the_gateway(commands: ChildRun) -> None:
    flow = section(commands, "flow")
    assert "/auth/cli?callback_url=" in flow["browser_reply"]
    assert flow["browser_page_status"] == 200
    assert flow["browser_status"].startswith("Logged in to local as 0x")
    after = json.loads(flow["after_browser_login"])
    assert after.get("error", {}).get("code") != "not_logged_in", after
    assert flow["browser_logout"].startswith("Logged out")
    assert json.loads(flow["after_browser_logout"])["error"]["code"] == "not_logged_in"


def test_commands_leave_no_key_behind(commands: ChildRun, hermes_sandbox: Sandbox) -> None:
    secret = secret_part(hermes_sandbox.subscriber.api_key)
    text = commands.stdout + commands.stderr
    for path in commands.home.rglob("*"):
        if path.is_file() and path.name != "params.json" and path.stat().st_size < 5_000_000:
            text += path.read_text(errors="replace")
    assert secret not in text


# -- configuration 3: an invalid config ----------------------------------------------------------

#: A well-formed token that names no account: the plugin must refuse it without echoing it.
BAD_KEY = "local:eyJhbGciOiJub25lIn0.eyJub3QiOiJhbi1hY2NvdW50In0.c2lnbmF0dXJl"


def test_invalid_config_registers_degraded_and_says_how_to_fix_it(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """A config register itself must decide on (here a shared state URL that is no Redis URL)
    is refused at register: the plugin registers degraded."""
    home: Path = tmp_path_factory.mktemp("hermes-broken")
    bad = {
        "svcApiKey": BAD_KEY,
        "environment": "local",
        "baseUrl": "http://127.0.0.1:9/api/v1",
        "stateUrl": "http://127.0.0.1:9",
    }
    run = run_child("broken", home, bad)
    found = section(run, "discovery")
    plugin = found["plugin"]
    # The model still gets the svc tools, so it can tell the user what is wrong.
    assert plugin is not None and plugin["enabled"] is True and plugin["error"] is None
    degraded_commands = ["svc-login", "svc-logout", "svc_login", "svc_logout"]
    assert found["tools"] == sorted(SVC_TOOLS) and sorted(found["commands"]) == degraded_commands
    assert not found["has_pre_llm_call"]  # nothing to inject
    assert_says_how_to_fix(run, home, "stateUrl")


def test_a_plain_chat_config_refused_at_first_use_says_how_to_fix_it(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """A plain chat config is validated at first use: the plugin registers in full, and its
    first tool call, command and prompt answer the error (never a traceback)."""
    home: Path = tmp_path_factory.mktemp("hermes-broken-later")
    bad = {"svcApiKey": BAD_KEY, "environment": "local", "baseUrl": "http://127.0.0.1:9/api/v1"}
    run = run_child("broken", home, bad)
    found = section(run, "discovery")
    plugin = found["plugin"]
    assert plugin is not None and plugin["enabled"] is True and plugin["error"] is None
    assert found["tools"] == sorted(SVC_TOOLS) and "svc_approve" in found["commands"]
    assert found["has_pre_llm_call"]
    assert_says_how_to_fix(run, home, "svcApiKey")


def assert_says_how_to_fix(run: ChildRun, home: Path, field: str) -> None:
    """The tool, /svc_login status (gateway and CLI) and the prompt hook of a bad config."""
    config_file = str(home / "hermes" / "config.yaml")
    error = json.loads(section(run, "tool")["result"])["error"]
    assert error["code"] == "plugin_misconfigured"
    assert "Invalid svc plugin config: " in error["message"] and field in error["message"]
    assert "plugins.entries.svc.settings" in error["hint"] and config_file in error["hint"]
    status = section(run, "status")
    for reply in (status["gateway"], status["cli"]):
        assert "not configured correctly" in reply and field in reply
        assert config_file in reply
    assert status["hook"] == []
    text = json.dumps(run.report) + run.stdout + run.stderr
    for log_file in (home / "hermes" / "logs").glob("*"):
        if log_file.is_file():
            text += log_file.read_text(errors="replace")
    assert "Traceback" not in text
    assert secret_part(BAD_KEY) not in text


def test_the_payments_skill_is_registered_and_readable(host: ChildRun) -> None:
    from svc_gateway.skills import skill_text

    found = section(host, "skill")
    view = found["view"]
    assert view["success"] is True, view
    body = json.dumps(view)
    assert "quote" in body and "confirm" in body and "svc_orderPlan" in body
    assert "Before buying, read the skill svc:payments" in found["order_description"]
    assert "quote → confirm → the user approves" in skill_text()
